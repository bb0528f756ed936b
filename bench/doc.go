// Package bench measures what a breaker costs a gRPC unary call, on
// loopback, for cbgrpc and its peers in one run: no breaker, cbgrpc over the
// in-process and the Redis coordinator, sony/gobreaker v2's distributed
// breaker with a Redis store, and failsafe-go's gRPC interceptor.
//
// It is a module of its own so that the peers never reach the library's
// go.mod. Run the whole comparison with
//
//	go run ./cmd/cbbench -md results.md -json results.json
//
// or the Go benchmarks with go test -bench . (both start their own
// redis-server on a free loopback port unless -redis is given).
package bench
