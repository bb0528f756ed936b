package redis

import (
	_ "embed"

	goredis "github.com/redis/go-redis/v9"
)

// Each script is lib.lua followed by the operation, so that the shared
// helpers cost no extra call.
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

	admitScript    = goredis.NewScript(libLua + admitLua)
	recordScript   = goredis.NewScript(libLua + recordLua)
	settleScript   = goredis.NewScript(libLua + settleLua)
	snapshotScript = goredis.NewScript(libLua + snapshotLua)
)
