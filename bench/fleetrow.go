package bench

// FleetRow is what one run measured. Rates are per second of the
// measurement; "replica-scope-second" (rss) is one replica calling one
// scope for one second, the unit of what a fleet costs Redis.
type FleetRow struct {
	Replicas       int     `json:"replicas"`
	Scopes         int     `json:"scopes"`
	Cluster        bool    `json:"cluster"`
	Cache          bool    `json:"admission_cache"`
	RecordInterval string  `json:"record_interval"`
	Failure        string  `json:"failure"`
	Rate           float64 `json:"target_calls_per_rss"`
	Seconds        float64 `json:"measured_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
	CallsPerRSS    float64 `json:"calls_per_rss"`

	// Redis CPU (INFO cpu: used_cpu_sys + used_cpu_user) per busy
	// replica-scope-second: the headline, ≤ 50 µs at default options
	// by docs/architecture.md's performance targets.
	RedisMicros float64 `json:"redis_cpu_us_per_rss"`
	RedisCores  float64 `json:"redis_cpu_cores"`
	// The servers' CPU with no fleet, measured for half a second before
	// the run, and the headline less that fixed cost.
	RedisIdleCores float64 `json:"redis_idle_cpu_cores"`
	RedisNetMicros float64 `json:"redis_cpu_us_per_rss_net_of_idle"`
	// The net figure split, when the run measured its replicas quiet
	// (FleetConfig.Quiet): what a replica costs with no call, per
	// replica-second (the feed's heartbeats, see HeartbeatsPerReplicaSecond,
	// and its connections) and that spread
	// over its scopes, per replica-scope-second; and the rest, what the
	// calls cost (the scripts), per replica-scope-second. QuietSeconds
	// is how long the replicas were measured quiet, QuietScripts the
	// scripts they sent meanwhile (0, or the split is off) and
	// QuietHeartbeatsPerReplicaSecond their heartbeats.
	ReplicaCPUMicros                float64 `json:"replica_cpu_us_per_replica_second"`
	ReplicaCPUMicrosPerRSS          float64 `json:"replica_cpu_us_per_rss"`
	ScopeCPUMicros                  float64 `json:"scope_cpu_us_per_rss"`
	QuietSeconds                    float64 `json:"quiet_seconds"`
	QuietScripts                    int64   `json:"quiet_scripts"`
	QuietHeartbeatsPerReplicaSecond float64 `json:"quiet_heartbeats_per_replica_second"`
	// The simulator's own CPU (getrusage), and what every other process
	// of the machine used meanwhile (/proc/stat less Redis and the
	// simulator): a run that had to share the cores says so here.
	ClientCores  float64 `json:"client_cpu_cores"`
	ClientMicros float64 `json:"client_cpu_us_per_rss"`
	OtherCores   float64 `json:"other_cpu_cores"`

	// From INFO commandstats: scripts (EVALSHA, EVAL; the feeds'
	// heartbeats are scripts too, left out of the count by the replicas'
	// own, but not of the time), their execution time inside Redis,
	// publishes (transitions and heartbeats, which scripts run) and
	// theirs, subscriptions made, and every command Redis ran (those
	// inside scripts included, INFO left out). Execution times are
	// elapsed, not CPU: on a machine short of cores they include the
	// time Redis waited for one.
	ScriptsPerSecond   float64 `json:"scripts_per_second"`
	ScriptsPerRSS      float64 `json:"scripts_per_rss"`
	ScriptMicros       float64 `json:"script_exec_us"`
	PublishesPerSecond float64 `json:"publishes_per_second"`
	PublishMicros      float64 `json:"publish_exec_us"`
	Subscribes         int64   `json:"subscribes"`
	CommandsPerSecond  float64 `json:"commands_per_second"`
	// The heartbeats the replicas sent, per replica-second: per node that
	// serves a scope the replica follows, its share of 2 a second on the
	// channel it shares with the others (coordinator/redis/heartbeat.go).
	HeartbeatsPerReplicaSecond float64 `json:"heartbeats_per_replica_second"`
	// The replicas' coordinator calls, as they count them.
	AdmitsPerRSS  float64 `json:"admits_per_rss"`
	RecordsPerRSS float64 `json:"records_per_rss"`

	// Memory after the run, with the keys still live: MEMORY USAGE of
	// every key, per scope. (used_memory over the empty server's is no
	// measure of a handful of scopes: it moves by tens of kilobytes
	// either way as the allocator and the server's buffers please.)
	KeysPerScope     float64 `json:"keys_per_scope"`
	KeyBytesPerScope float64 `json:"key_bytes_per_scope"`
	// The replicas' connections at the end of the measurement, and the
	// memory their buffers held (mem_clients_normal), per replica.
	ClientsPerReplica      float64 `json:"connections_per_replica"`
	ClientMemoryPerReplica float64 `json:"client_memory_bytes_per_replica"`

	// The replicas' coordinator calls as they timed them (Admit, Record,
	// Settle: from the call to its answer, queueing in the client and in
	// Redis included), in µs, within a factor of two (see latencies).
	CoordinatorP50 float64 `json:"coordinator_call_p50_us"`
	CoordinatorP99 float64 `json:"coordinator_call_p99_us"`
	// Signs of an overloaded machine, during the measurement:
	// coordinator calls that failed or took longer than the Breaker's
	// coordinator timeout (which sends it into back-off), and transition
	// feeds lost. FirstError is the first coordinator error of the run.
	CoordinatorErrors int64  `json:"coordinator_errors"`
	SlowCalls         int64  `json:"slow_coordinator_calls"`
	FeedsLost         int64  `json:"feeds_lost"`
	FirstError        string `json:"first_error,omitempty"`

	// Trips: transitions to open sent before the measurement ended, those
	// some replica never learned of, and the propagation of the others:
	// from the sending of the Record or Settle that made the trip until
	// the last replica's cache knew, in µs.
	Trips          int     `json:"trips"`
	Unheard        int     `json:"unheard_trips"`
	PropagationP50 float64 `json:"propagation_p50_us"`
	PropagationP99 float64 `json:"propagation_p99_us"`
	PropagationMax float64 `json:"propagation_max_us"`
	// Detection, over each scope's first trip: the scopes every replica
	// rejected and those some replica never did; for the former, the
	// failing calls the dependency absorbed before every replica
	// rejected, the failures the window held when it tripped (what the
	// policy needed: MinCalls if it held nothing else), and what the
	// fleet let through beyond that, per replica (issue 12's bound: 3).
	StoppedScopes    int     `json:"stopped_scopes"`
	UnstoppedScopes  int     `json:"unstopped_scopes"`
	AbsorbedPerScope float64 `json:"absorbed_per_scope"`
	NeededPerScope   float64 `json:"window_failures_per_scope"`
	ExcessPerReplica float64 `json:"excess_per_replica"`
	// Calls of the whole run (warm-up included): made, rejected by the
	// breaker, failed by the dependency; and the outcomes of the admitted
	// ones that never reached Redis, once every Breaker was closed
	// (dropped: in back-off, queue full, coordinator error). A failure
	// that never reaches Redis is one the window never counts.
	Calls       int64 `json:"calls"`
	Rejected    int64 `json:"rejected"`
	Failed      int64 `json:"failed"`
	Undelivered int64 `json:"undelivered_outcomes"`
}

// fleetEnd is what the simulator reads once the replicas have stopped.
type fleetEnd struct {
	trips      tripResults
	totals     fleetCounts
	firstError string
	idleCores  float64
	// keys and keyBytes are what MEMORY USAGE counts.
	keys, keyBytes int64
	// quiet are the samples at either end of the quiet measurement.
	quiet [2]sample
	// empty is what the servers read before the fleet connected.
	empty serverStats
}

// newFleetRow computes the row of a run measured from before to after.
func newFleetRow(cfg FleetConfig, target Target, before, after sample, end fleetEnd) FleetRow {
	d := after.stats.sub(before.stats)
	secs := after.at.Sub(before.at).Seconds()
	rss := float64(cfg.Replicas*cfg.Scopes) * secs
	client := (after.client - before.client).Seconds()
	scripts := d.sum("evalsha", "eval", "evalsha_ro", "eval_ro")
	callScripts := max(0, scripts.calls-(after.sent.heartbeats-before.sent.heartbeats))
	var commands int64
	for name, c := range d.commands {
		if name != "info" {
			commands += c.calls
		}
	}
	calls := func(n func(fleetCounts) int64) float64 { return float64(n(after.counts) - n(before.counts)) }
	scopes, replicas := float64(cfg.Scopes), float64(cfg.Replicas)
	net := d.cpu - end.idleCores*secs
	row := FleetRow{
		Replicas:                   cfg.Replicas,
		Scopes:                     cfg.Scopes,
		Cluster:                    target.Cluster,
		Cache:                      !cfg.NoCache,
		RecordInterval:             cfg.recordInterval().String(),
		Failure:                    cfg.Failure.String(),
		Rate:                       cfg.Rate,
		Seconds:                    secs,
		CallsPerRSS:                calls(func(c fleetCounts) int64 { return c.calls }) / rss,
		RedisMicros:                d.cpu * 1e6 / rss,
		RedisCores:                 d.cpu / secs,
		RedisIdleCores:             end.idleCores,
		RedisNetMicros:             net * 1e6 / rss,
		ClientCores:                client / secs,
		ClientMicros:               client * 1e6 / rss,
		ScriptsPerSecond:           float64(callScripts) / secs,
		ScriptsPerRSS:              float64(callScripts) / rss,
		PublishesPerSecond:         float64(d.sum("publish", "spublish").calls) / secs,
		HeartbeatsPerReplicaSecond: float64(after.sent.heartbeats-before.sent.heartbeats) / (replicas * secs),
		Subscribes:                 d.sum("subscribe", "ssubscribe").calls,
		CommandsPerSecond:          float64(commands) / secs,
		AdmitsPerRSS:               calls(func(c fleetCounts) int64 { return c.admits }) / rss,
		RecordsPerRSS:              calls(func(c fleetCounts) int64 { return c.records }) / rss,
		KeysPerScope:               float64(end.keys) / scopes,
		KeyBytesPerScope:           float64(end.keyBytes) / scopes,
		ClientsPerReplica:          float64(after.stats.clients-end.empty.clients) / replicas,
		ClientMemoryPerReplica:     float64(after.stats.clientMemory-end.empty.clientMemory) / replicas,
		CoordinatorP50:             micros(quantile(before.latency, after.latency, 0.5)),
		CoordinatorP99:             micros(quantile(before.latency, after.latency, 0.99)),
		CoordinatorErrors:          after.counts.errors - before.counts.errors,
		SlowCalls:                  after.counts.slow - before.counts.slow,
		FeedsLost:                  after.counts.feedsLost - before.counts.feedsLost,
		FirstError:                 end.firstError,
		Trips:                      end.trips.trips,
		Unheard:                    end.trips.unheard,
		Calls:                      end.totals.calls,
		Rejected:                   end.totals.rejected,
		Failed:                     end.totals.failed,
		Undelivered:                end.totals.calls - end.totals.rejected - end.totals.delivered,
	}
	if m := after.machine - before.machine; m > 0 {
		row.OtherCores = max(0, (m.Seconds()-client-d.cpu)/secs)
	}
	if q0, q1 := end.quiet[0], end.quiet[1]; !q1.at.IsZero() {
		qsecs := q1.at.Sub(q0.at).Seconds()
		quiet := q1.stats.cpu - q0.stats.cpu - end.idleCores*qsecs
		row.QuietSeconds, row.QuietScripts = qsecs, q1.sent.scripts-q0.sent.scripts
		row.QuietHeartbeatsPerReplicaSecond = float64(q1.sent.heartbeats-q0.sent.heartbeats) / (replicas * qsecs)
		row.ReplicaCPUMicros = quiet * 1e6 / (replicas * qsecs)
		row.ReplicaCPUMicrosPerRSS = row.ReplicaCPUMicros / scopes
		row.ScopeCPUMicros = row.RedisNetMicros - row.ReplicaCPUMicrosPerRSS
	}
	if scripts.calls > 0 {
		row.ScriptMicros = float64(scripts.usec) / float64(scripts.calls)
	}
	if p := d.sum("publish", "spublish"); p.calls > 0 {
		row.PublishMicros = float64(p.usec) / float64(p.calls)
	}
	if p := end.trips.propagation; len(p) > 0 {
		row.PropagationP50 = micros(p[len(p)/2])
		row.PropagationP99 = micros(p[len(p)*99/100])
		row.PropagationMax = micros(p[len(p)-1])
	}
	row.StoppedScopes, row.UnstoppedScopes = end.trips.scopes, end.trips.unstopped
	if t := end.trips; t.scopes > 0 {
		row.AbsorbedPerScope = float64(t.absorbed) / float64(t.scopes)
		row.NeededPerScope = float64(t.needed) / float64(t.scopes)
		row.ExcessPerReplica = float64(t.absorbed-t.needed) / float64(t.scopes) / replicas
	}
	return row
}
