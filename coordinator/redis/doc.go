// Package redis is a [coordinator.Coordinator] on Redis: one breaker state,
// one sliding window and one probe budget per scope, shared by every replica
// that talks to the same Redis or Redis Cluster.
//
// Start with [New] and a go-redis client:
//
//	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	coord := cbredis.New(rdb)
//
// With ContextTimeoutEnabled, go-redis bounds each command by its context's
// deadline, and the coordinator says so ([Coordinator.HonoursDeadlines]):
// a Breaker then calls it from the call's own goroutine instead of waiting
// for a goroutine of its own.
//
// Each operation is one Lua script call (EVALSHA, falling back to EVAL when
// Redis has not cached the script), atomic on the server and timed by the
// server's clock, so replicas with skewed clocks agree. Admitting a call to
// a closed breaker reads and never writes, once the scope is born.
//
// # Keys
//
// A scope's keys (its breaker's state hash, its window, its probe leases
// and its policy override, with its transition channel) share one hash
// tag made of the SHA-256 of the scope, so one Redis Cluster slot,
// whatever bytes the scope holds; the fleet's keys and the heartbeat
// channels have tags of their own. Every name begins with the prefix
// ("cbgrpc:" unless [WithPrefix] says otherwise) and the version of the
// layout, so a rolling deploy never mixes layouts. The key layout, every
// key and every hash field, is described once, in docs/architecture.md
// ("Redis key layout"). Closed state and its window expire a moment after
// the window has passed (key TTLs are garbage collection only: decisions
// compare times with the clock); open, half-open, isolated and disabled
// state never expires.
//
// # Generations
//
// Every new generation is [implement.NextGeneration]: max(previous + 1,
// now in ms × 1000), above every generation minted before. A scope is born
// by its first Admit, Record, Settle or operator's command when it has no
// state hash, or its closed state is past keeping; the previous generation
// is then that of the expired state or, when the state hash is missing, the
// label of the window key, which lives exactly as long as the state hash
// (0 when neither is left). So a state hash lost on its own (eviction, a
// deleted key) is a birth above the window's label: no outcome of the lost
// generation is adopted, and no generation is handed out twice. A scope
// whose keys Redis has deleted altogether is born at now × 1000. Snapshot
// never gives birth: a scope that is not born reads as
// coordinator.Snapshot{Scope: scope}, generation 0.
//
// # Transitions
//
// Every script that moves a breaker publishes the transition on the scope's
// channel in the same step (SPUBLISH on a Redis Cluster, so the message
// stays on the shard that owns the scope; PUBLISH on a single server), as
// "from to generation at open_until reason". [Coordinator.Watch] follows
// scopes on that feed ([coordinator.Watcher]). Every write first ends an
// isolation whose time has passed, and publishes that too.
//
// A feed proves that it still hears what the coordinator publishes, since
// a subscription can go silent without an error: through the client's
// command connections, as the scripts publish, one of the Watches that
// share a heartbeat channel publishes a heartbeat on it every 500 ms
// ([WithHeartbeat]; heartbeat.lua), and the others hear it. A Watch
// reports the feed lost ([coordinator.ErrFeedLost], saying why) within
// 2 s of a fault its heartbeats can tell. A message on a followed channel
// that no script of this module published is ignored and counted
// ([Coordinator.IgnoredMessages]). The protocol, what it tells and what it
// cannot, and its cost are in docs/architecture.md ("The feed's liveness
// protocol").
//
// An operator's commands ([Coordinator.Isolate], Release, Disable and
// Enable, of [coordinator.Controller]) run one script, control.lua, and
// keep the operator's note in the state hash. [Coordinator.List] finds
// every scope with SCAN (see its cost there).
//
// A retried Record cannot count twice when the caller names its batch
// (RecordRequest.BatchID): the last [implement.RecentBatches] batch IDs
// of a scope are kept beside its state. What the window keeps of the
// replicas that record (Policy.Outliers) is in replicas.lua.
//
// [Coordinator.Check] ([coordinator.Checker]) tells at start-up, in words,
// why Redis cannot serve: unreachable, credentials refused, a grant
// missing, a replica; [Coordinator.ErrorKind] names the cause of any of
// its errors.
package redis
