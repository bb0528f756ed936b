package redis

import (
	"crypto/sha256"
	"encoding/hex"
)

// keys are a scope's keys, in the order the scripts take them. The last
// is the scope's transition channel, passed with the keys so that it
// shares their hash tag, and so their cluster slot: a sharded PUBLISH from
// the script must stay in the slot the script runs in.
type keys [5]string

// scopeKeys names the keys of scope. The hash tag is a digest of the
// scope, so that any bytes (braces included) and any length make a short,
// valid tag, and the full SHA-256 keeps two scopes from sharing a key.
func scopeKeys(prefix, scope string) keys {
	sum := sha256.Sum256([]byte(scope))
	base := prefix + "{" + hex.EncodeToString(sum[:]) + "}:"
	return keys{base + "s", base + "w", base + "p", base + "b", base + "t"}
}
