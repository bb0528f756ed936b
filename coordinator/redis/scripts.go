package redis

import (
	_ "embed"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The parts scripts are assembled from (newScripts), each a .lua file:
// lib.lua (arguments, clock, answer), state.lua (the state hash's fields),
// read.lua (reading a scope),
// write.lua (changing it), replicas.lua (the replicas' rules), then the
// operations. Every operation is one script, so that the shared helpers
// cost no extra call.
var (
	//go:embed lib.lua
	libLua string
	//go:embed state.lua
	stateLua string
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

type scripts struct {
	admit, record, settle, snapshot, control, push *goredis.Script
	// policy, heartbeat, census and cause need none of lib.lua.
	policy, heartbeat, census, cause *goredis.Script
	// sources are the scripts' texts, by operation, for the test that
	// loads and lints each whole.
	sources map[string]string
}

func newScripts(publish string) *scripts {
	s := &scripts{sources: make(map[string]string)}
	// Every script begins by naming its publish command.
	header := define("PUBLISH", quote(publish))
	script := func(name string, parts ...string) *goredis.Script {
		s.sources[name] = header + strings.Join(parts, "")
		return goredis.NewScript(s.sources[name])
	}
	// Admit answers a calm scope from admit.lua alone, before the helpers
	// of reading and writing are made. read.lua and write.lua need
	// state.lua before them.
	s.admit = script("admit", libLua, admitLua, stateLua, readLua, writeLua, admitWriteLua)
	s.record = script("record", libLua, stateLua, readLua, writeLua, replicasLua, recordLua)
	s.settle = script("settle", libLua, stateLua, readLua, writeLua, settleLua)
	s.snapshot = script("snapshot", libLua, stateLua, readLua, replicasLua, snapshotLua)
	s.control = script("control", libLua, stateLua, readLua, writeLua, controlLua)
	s.push = script("push", libLua, stateLua, readLua, writeLua, pushLua)
	s.policy = script("policy", policyLua)
	s.heartbeat = script("heartbeat", heartbeatLua)
	s.census = script("census", censusLua)
	s.cause = script("cause", causeLua)
	return s
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
