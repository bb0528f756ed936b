package redis

import (
	_ "embed"

	goredis "github.com/redis/go-redis/v9"
)

// Each script is a line naming the publish command, lib.lua, then the
// operation, so that the shared helpers cost no extra call.
var (
	//go:embed lib.lua
	libLua string
	//go:embed admit.lua
	admitLua string
	//go:embed record.lua
	recordLua string
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

	// A Redis Cluster gets sharded pub/sub, which stays on the shard that
	// owns the scope's slot instead of flooding every node; a single
	// server gets plain pub/sub, which Redis 6 has too.
	plainScripts   = newScripts("PUBLISH")
	shardedScripts = newScripts("SPUBLISH")
)

type scripts struct {
	admit, record, settle, snapshot, control, push *goredis.Script
	// policy needs none of lib.lua.
	policy *goredis.Script
}

func newScripts(publish string) *scripts {
	lib := "local PUBLISH = '" + publish + "'\n" + libLua
	return &scripts{
		admit:    goredis.NewScript(lib + admitLua),
		record:   goredis.NewScript(lib + recordLua),
		settle:   goredis.NewScript(lib + settleLua),
		snapshot: goredis.NewScript(lib + snapshotLua),
		control:  goredis.NewScript(lib + controlLua),
		push:     goredis.NewScript(lib + pushLua),
		policy:   goredis.NewScript("local PUBLISH = '" + publish + "'\n" + policyLua),
	}
}
