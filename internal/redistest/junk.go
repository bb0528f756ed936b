package redistest

import (
	"crypto/sha256"
	"encoding/hex"
)

// ScopeKey names the key in which the Redis coordinator keeps part of
// scope's state under prefix: part is "state", "window", "probes" or
// "policy" (the layout of coordinator/redis/keys.go, whose tests keep the
// two in step). Tests write junk into it to see one scope's data go bad.
func ScopeKey(prefix, scope, part string) string {
	sum := sha256.Sum256([]byte(scope))
	return prefix + "v2:{" + hex.EncodeToString(sum[:]) + "}:" + part
}
