// Package redis is a [coordinator.Coordinator] on Redis: one breaker state,
// one sliding window and one probe budget per scope, shared by every replica
// that talks to the same Redis or Redis Cluster.
//
// Start with [New] and a go-redis client:
//
//	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	coord := cbredis.New(rdb)
//
// Each of Admit, Record and Settle is one Lua script call (EVALSHA, falling
// back to EVAL when Redis has not cached the script), atomic on the server
// and timed by the server's clock, so replicas with skewed clocks agree.
// Admitting a call to a closed breaker reads and never writes.
//
// A scope's keys are
//
//	<prefix>{<sha256 of the scope, hex>}:s   state hash (and the readable scope, field "scope")
//	<prefix>{<sha256 of the scope, hex>}:w   window: counters per time bucket
//	<prefix>{<sha256 of the scope, hex>}:p   probe leases: claim -> deadline
//	<prefix>{<sha256 of the scope, hex>}:b   the scope's recent batch IDs
//
// under the prefix "cbgrpc:" unless [WithPrefix] says otherwise. The shared
// hash tag puts them in one Redis Cluster slot, whatever bytes the scope
// holds. Closed state and its window expire a moment after the window has
// passed; open and half-open state never expires.
//
// If the state hash vanishes (eviction, a deleted key) while the window
// still holds live buckets, the breaker restarts closed in a random
// generation that no surviving outcome carries. A [Coordinator.Snapshot]
// taken before the next write reports such a scope as generation 0.
package redis
