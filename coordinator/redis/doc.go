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
// A scope's keys are, with h the SHA-256 of the scope in hex:
//
//	<prefix>v2:{h}:state           hash: the breaker
//	<prefix>v2:{h}:window          hash: the generation label and the buckets of the window
//	<prefix>v2:{h}:probes          hash: probe leases, claim -> deadline (Unix ms)
//	<prefix>v2:{h}:transitions     the scope's transition channel (pub/sub, not a key); it also carries "policy <version>" when the scope's override changes
//	<prefix>v2:{fleet}:heartbeat       the heartbeat channel (pub/sub) every Watch shares, on a single server;
//	                                   :heartbeat:<level>.<group> once it has split (more than 1,000 followers)
//	<prefix>v2:{hb<n>}:heartbeat...    on a Cluster, the same channels, one tag per node (heartbeatBase)
//	<prefix>v2:{h}:policy          hash: the scope's policy override (override, version, by, reason, at), never expiring
//	<prefix>v2:{fleet}:policy      hash: the fleet default, likewise, in a slot of its own
//	<prefix>v2:{fleet}:policy-changes  the fleet default's channel: "policy <version>"
//
// under the prefix "cbgrpc:" unless [WithPrefix] says otherwise. The shared
// hash tag puts them in one Redis Cluster slot, whatever bytes the scope
// holds. "v2" is the version of this layout: coordinators of another layout
// use other names, so a rolling deploy never mixes layouts (the old and the
// new replicas then keep separate breakers until the deploy ends).
//
// The state hash holds the fields state ("closed", "open", "half-open",
// "isolated" or "disabled"), generation, opened_at, open_for, open_until,
// consecutive_failures, probe_successes, expires_at (when a closed
// generation is past keeping), pushable_generation (while open by the
// rules and no server pushback has set the period: the generation it
// opened from), scope (the readable scope, for operators)
// and, while isolated or disabled, the operator's note: note_by,
// note_reason, note_for, noted_at; and for each policy Records carried
// (coordinator.Snapshot.Policies), policy:<fingerprint> holding "<ms>
// <source> <encoding>", at most [implement.RecentPolicies] of them. Times
// are Unix milliseconds. reporters holds the replicas heard last
// (Policy.Outliers), which outlive generations.
//
// The window hash keeps its metadata and its buckets apart by the form of
// the field name: metadata fields are words (generation: the generation
// its buckets belong to), bucket fields are decimal numbers (the bucket's
// index, its start in Unix ms divided by the bucket width) holding "calls
// failures slow". A field is read as a bucket only if it parses as a
// number, so metadata can be added without a new layout: the requests
// callers throttled (coordinator.Outcome.Throttled) are kept so, in fields
// throttled:<index> with their running total (throttled, throttled_head),
// present only while the window holds some; and so is the layout the
// buckets were written with (width: the bucket width in ms, buckets: how
// many), which every reader reads them with, and the start of the last
// bucket a Record of it counted in (laid_at): a Record under another
// layout counts in it while that was within a window of it, and re-lays
// it into its own after (record.lua); and the replicas that failed in the
// generation, replica:<id>, with the fleet's run's number and their count
// in replicas (replicas.lua).
//
// Closed state, its window and its batch IDs expire together a moment
// after the window has passed (key TTLs are garbage collection only:
// decisions compare expires_at with the clock). Open, half-open, isolated
// and disabled state never expires.
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
// a subscription can go silent without an error (kept on a demoted master
// after a failover, half-open, behind a proxy that stopped forwarding, on
// a node that lost the slot). Through the client's command connections,
// as the scripts publish, the Watches publish heartbeats that their
// subscriptions follow: every 500 ms ([WithHeartbeat]) one of the Watches
// that share a heartbeat channel publishes on it (a script, heartbeat.lua),
// and the others hear it. Each heartbeat carries the replication ID of the
// node it ran on, which a replica shares with its master and a failover
// makes anew. A Watch reports the feed lost ([coordinator.ErrFeedLost],
// saying why) when a heartbeat reaches no subscriber on the node the
// commands go to (a failover, a moved slot), when one heard, or the node a
// Watch publishes to, has another replication ID than the subscription
// heard first (a demoted master now relaying a new one's stream, with a
// gap), when none has come for 1.5 s (three periods), or when Redis
// unsubscribes a channel on its own (a slot that moved): within 2 s of the
// fault, or of the client's following a failover. What no heartbeat tells
// is a subscription left on an old master that others still publish to
// while the Watch's commands go to a new one (a split brain); heartbeat.go
// says what the Watch does then. A Watch that follows no scope holds no
// subscription and sends no heartbeat. A message on a followed channel
// that no script of this module published (anyone with PUBLISH can send
// one) is ignored and counted ([Coordinator.IgnoredMessages]); it does not
// end the feed. The cost, per node that serves a
// scope a replica follows: two commands a second per shared channel,
// which all its followers receive, and nothing per replica. On a single
// server every Watch of the prefix shares one channel; on a Cluster,
// every Watch subscribed to the node. A channel with more than 1,000
// followers splits, so that a heartbeat never holds the node long
// (2.1-2.6 µs a follower).
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
package redis
