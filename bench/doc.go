// Package bench measures what cbgrpc costs, in a module of its own so that
// the peers it compares with never reach the library's go.mod.
//
// [Compare] measures what a breaker costs a gRPC unary call, on loopback,
// for cbgrpc and its peers in one run: no breaker, cbgrpc over the
// in-process and the Redis coordinator, sony/gobreaker v2's distributed
// breaker with a Redis store, and failsafe-go's gRPC interceptor. Run the
// whole comparison with
//
//	go run ./cmd/cbbench -md results.md -json results.json
//
// or the Go benchmarks with go test -bench . (which start their own
// redis-server on a free loopback port; cbbench does too unless -redis is
// given).
//
// [RunFleet] simulates a fleet: virtual replicas, each a real Breaker with
// its own go-redis client and Redis coordinator, calling scopes at a fixed
// rate through the Breaker's unary interceptor to a stub dependency that
// fails as a [Failure] says. It measures what the fleet costs Redis per
// busy replica-scope-second (INFO cpu and commandstats), and apart what
// the replicas cost with no call (their feeds' heartbeats); Redis memory
// per scope and per replica; how many failing calls the dependency
// absorbs before every replica rejects, and how fast a trip reaches every
// replica's cache. Run it with
//
//	go run ./cmd/cbfleetsim -sizes 16x1,64x1,256x1,64x8
//
// against a redis-server, or with -cluster a 3-master Redis Cluster, that
// it starts on free loopback ports for each run.
//
// [RunTrip] measures what a fleet's breaker decides when its dependency
// goes down after a healthy spell, wholly or in part (a brownout of
// errors or of latency, a zone), or stops answering (a stall, of unary
// calls or of server streams), when it recovers and when it relapses,
// and when a replica fails alone, beside gobreaker's and failsafe-go's
// local breakers on the same dependency. Run every scenario, or some
// groups, with
//
//	go run ./cmd/cbtripsim -only brownout,zone,recovery,stall
//
// cbrulesim measures the trip rules' statistics over hours of simulated
// time, the in-process coordinator on a fake clock: how often a steady
// share of failures below FailureRatio trips the breaker, and how soon a
// brownout does.
//
//	go run ./cmd/cbrulesim -hours 40
package bench
