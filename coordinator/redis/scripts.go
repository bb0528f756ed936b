package redis

import (
	_ "embed"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The parts scripts are assembled from (newScripts), each a .lua file:
// lib.lua (arguments, clock, answer), read.lua (reading a scope),
// write.lua (changing it), replicas.lua (the replicas' rules), then the
// operations. Every operation is one script, so that the shared helpers
// cost no extra call.
var (
	//go:embed lib.lua
	libLua string
	//go:embed read.lua
	readLua string
	//go:embed write.lua
	writeLua string
	//go:embed admit.lua
	admitLua string
	//go:embed admit_write.lua
	admitWriteLua string
	//go:embed record.lua
	recordLua string
	//go:embed replicas.lua
	replicasLua string
	//go:embed settle.lua
	settleLua string
	//go:embed snapshot.lua
	snapshotLua string
	//go:embed control.lua
	controlLua string
	//go:embed push.lua
	pushLua string
	//go:embed policy.lua
	policyLua string
	//go:embed heartbeat.lua
	heartbeatLua string
	//go:embed census.lua
	censusLua string
	//go:embed cause.lua
	causeLua string

	// A Redis Cluster that has sharded pub/sub (features.go) gets it,
	// which stays on the shard that owns the scope's slot instead of
	// flooding every node; a single server, and a Cluster of Redis 6, get
	// plain pub/sub.
	plainScripts   = newScripts("PUBLISH")
	shardedScripts = newScripts("SPUBLISH")
)

// A stateField is a field of the state hash that the scripts read and
// write at once: as text or as an integer, and as zero (a Lua value; ""
// for nil) when the hash lacks it.
type stateField struct {
	name    string
	integer bool
	zero    string
}

// stateFields are the breaker's fields in the state hash, the one list of
// them: stored (read.lua) reads them at once, and save (write.lua) writes
// them at once, both through the Lua that stateLua makes of them.
var stateFields = []stateField{
	{name: "state"},
	{name: "generation", integer: true},
	{name: "opened_at", integer: true},
	{name: "open_for", integer: true},
	{name: "open_until", integer: true},
	{name: "consecutive_failures", integer: true},
	{name: "consecutive_stalls", integer: true, zero: "0"},
	{name: "probe_successes", integer: true},
	{name: "expires_at", integer: true},
	{name: "gc_until", integer: true, zero: "0"},
	{name: "recovered_at", integer: true, zero: "0"},
	{name: "failing_since", integer: true, zero: "0"},
}

// batchFields are the fields Record alone reads with the state (see
// record.lua): the batch IDs it counted, how many, and the replicas it
// heard. Record writes the first two with the state once it changed
// them, and the last apart.
var batchFields = []stateField{
	{name: "batches", zero: "''"},
	{name: "batch_count", integer: true, zero: "0"},
	{name: "reporters", zero: "false"},
}

// stateLua defines, for read.lua and write.lua, STORED_FIELDS, the fields
// stored reads (stateFields, and with batches batchFields too), and the
// functions that turn the fields to a state and back:
// decode_state(v), the state of v, what HMGET of STORED_FIELDS returned;
// encode_state(s, ...), the fields and values of stateFields in s for
// HSET, then the arguments that follow. It writes the Lua out field by
// field: a loop over a list of the fields costs a calm Record more
// (bench/RESULTS.md).
func stateLua(batches bool) string {
	stored := stateFields
	if batches {
		stored = append(stateFields[:len(stateFields):len(stateFields)], batchFields...)
	}
	names := make([]string, len(stored))
	for i, f := range stored {
		names[i] = f.name
	}
	var b strings.Builder
	b.WriteString(define("STORED_FIELDS", list(names)))
	b.WriteString("local function decode_state(v)\n  return {")
	for i, f := range append(stateFields[:len(stateFields):len(stateFields)], batchFields...) {
		if i > 0 {
			b.WriteString(", ")
		}
		v := "v[" + strconv.Itoa(i+1) + "]"
		if f.integer {
			v = "stored_int('state', " + quote(f.name) + ", " + v + ")"
		}
		if f.zero != "" {
			v += " or " + f.zero
		}
		b.WriteString(f.name + " = " + v)
	}
	b.WriteString("}\nend\nlocal function encode_state(s, ...)\n  return ")
	for _, f := range stateFields {
		v := "s." + f.name
		if f.zero != "" {
			v = "(" + v + " or " + f.zero + ")"
		}
		if f.integer {
			v = "int(" + v + ")"
		}
		b.WriteString(quote(f.name) + ", " + v + ", ")
	}
	b.WriteString("...\nend\n")
	return b.String()
}

type scripts struct {
	admit, record, settle, snapshot, control, push *goredis.Script
	// policy, heartbeat, census and cause need none of lib.lua.
	policy, heartbeat, census, cause *goredis.Script
}

func newScripts(publish string) *scripts {
	// Every script begins by naming its publish command.
	header := define("PUBLISH", quote(publish))
	script := func(parts ...string) *goredis.Script {
		return goredis.NewScript(header + strings.Join(parts, ""))
	}
	return &scripts{
		// Admit answers a calm scope from admit.lua alone, before the
		// helpers of reading and writing are made. read.lua and write.lua
		// need stateLua before them.
		admit:     script(libLua, admitLua, stateLua(false), readLua, writeLua, admitWriteLua),
		record:    script(libLua, stateLua(true), readLua, writeLua, replicasLua, recordLua),
		settle:    script(libLua, stateLua(false), readLua, writeLua, settleLua),
		snapshot:  script(libLua, stateLua(false), readLua, replicasLua, snapshotLua),
		control:   script(libLua, stateLua(false), readLua, writeLua, controlLua),
		push:      script(libLua, stateLua(false), readLua, writeLua, pushLua),
		policy:    script(policyLua),
		heartbeat: script(heartbeatLua),
		census:    script(censusLua),
		cause:     script(causeLua),
	}
}

// A scriptOf picks one script of a set, for the calls that learn first
// which set suits the server (scriptSet).
type scriptOf func(*scripts) *goredis.Script

func admitScript(s *scripts) *goredis.Script    { return s.admit }
func recordScript(s *scripts) *goredis.Script   { return s.record }
func settleScript(s *scripts) *goredis.Script   { return s.settle }
func snapshotScript(s *scripts) *goredis.Script { return s.snapshot }
func controlScript(s *scripts) *goredis.Script  { return s.control }
func pushScript(s *scripts) *goredis.Script     { return s.push }

// define is a line of Lua that binds name to the Lua expression value.
func define(name, value string) string {
	return "local " + name + " = " + value + "\n"
}

// quote is s as a Lua string; the parts given here hold no quote or
// backslash.
func quote(s string) string { return "'" + s + "'" }

// list is a Lua table of the strings ss.
func list(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return "{" + strings.Join(q, ", ") + "}"
}
