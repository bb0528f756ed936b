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
//	<prefix>{<sha256 of the scope, hex>}:t   the scope's transition channel (pub/sub, not a key)
//
// under the prefix "cbgrpc:" unless [WithPrefix] says otherwise. The shared
// hash tag puts them in one Redis Cluster slot, whatever bytes the scope
// holds. Closed state and its window expire a moment after the window has
// passed; open and half-open state never expires.
//
// The window key lives exactly as long as the state hash and carries its
// generation. If the state hash vanishes on its own (eviction, a deleted
// key) while it still mattered, the next Admit, Record or Settle finds the
// window key alone and restarts the breaker closed in a random 44-bit
// generation that no surviving bucket or outcome in flight carries. A
// [Coordinator.Snapshot] taken before that write reports the scope as
// generation 0 with no counts.
//
// Every script that moves a breaker publishes the transition on the scope's
// channel in the same step (SPUBLISH on a Redis Cluster, so the message
// stays on the shard that owns the scope; PUBLISH on a single server).
// [Coordinator.Watch] follows scopes on that feed ([coordinator.Watcher]).
//
// An operator's commands ([Coordinator.Isolate], Release, Disable and
// Enable, of [coordinator.Controller]) run one script, control.lua, and
// keep the operator's note in the state hash; isolated and disabled state
// never expires. [Coordinator.List] finds every scope with SCAN (see its
// cost there).
//
// A retried Record cannot count twice when the caller marks it with
// [coordinator.WithBatchID]: the last [coordinator.RecentBatches] batch IDs
// of a scope are kept beside its state.
package redis
