package redis

import (
	_ "embed"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Each script is a line naming the publish command, lib.lua (arguments,
// clock, answer), read.lua (reading a scope), write.lua (changing it) if
// it writes, then the operation, so that the shared helpers cost no extra
// call. An operation may mark with a line "-- read.lua, write.lua" where
// those two go instead, so that what it answers before the mark does not
// pay for making their helpers.
var (
	//go:embed lib.lua
	libLua string
	//go:embed read.lua
	readLua string
	//go:embed write.lua
	writeLua string
	//go:embed admit.lua
	admitLua string
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

	// A Redis Cluster gets sharded pub/sub, which stays on the shard that
	// owns the scope's slot instead of flooding every node; a single
	// server gets plain pub/sub, which Redis 6 has too.
	plainScripts   = newScripts("PUBLISH")
	shardedScripts = newScripts("SPUBLISH")
)

type scripts struct {
	admit, record, settle, snapshot, control, push *goredis.Script
	// policy and heartbeat need none of lib.lua.
	policy, heartbeat *goredis.Script
}

func newScripts(publish string) *scripts {
	header := "local PUBLISH = '" + publish + "'\n"
	reads := header + libLua + readLua
	writes := func(op string) *goredis.Script {
		before, after, marked := strings.Cut(op, helpersMark)
		if !marked {
			return goredis.NewScript(reads + writeLua + op)
		}
		return goredis.NewScript(header + libLua + before + readLua + writeLua + after)
	}
	return &scripts{
		admit:     writes(admitLua),
		record:    writes(replicasLua + recordLua),
		settle:    writes(settleLua),
		snapshot:  goredis.NewScript(reads + replicasLua + snapshotLua),
		control:   writes(controlLua),
		push:      writes(pushLua),
		policy:    goredis.NewScript(header + policyLua),
		heartbeat: goredis.NewScript(header + heartbeatLua),
	}
}

// helpersMark is the line of an operation where read.lua and write.lua go.
const helpersMark = "-- read.lua, write.lua\n"
