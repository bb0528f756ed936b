package redis

import (
	"crypto/sha256"
	"encoding/hex"
)

// layout is the version of the key layout (docs/architecture.md, "Redis
// key layout"), part of every key and channel name, so that coordinators of two layouts in one fleet (a rolling
// deploy) never read or write each other's data.
const layout = "v2"

// keys are a scope's keys, in the order the scripts take them
// (docs/architecture.md, "Redis key layout"). The fourth is the scope's
// transition channel, passed with the keys so that it shares their hash
// tag, and so their cluster slot: a sharded PUBLISH from the script must
// stay in the slot the script runs in. The last is the scope's policy
// override (policy.go).
type keys [5]string

// Indexes of keys.
const (
	keyState = iota
	keyWindow
	keyProbes
	keyChannel
	keyPolicy
)

// stateSuffix ends the name of every state hash, which List looks for.
const stateSuffix = "}:state"

// scopeKeys names the keys of scope. The hash tag is a digest of the
// scope, so that any bytes (braces included) and any length make a short,
// valid tag, and the full SHA-256 keeps two scopes from sharing a key.
func scopeKeys(prefix, scope string) keys {
	sum := sha256.Sum256([]byte(scope))
	base := prefix + layout + ":{" + hex.EncodeToString(sum[:])
	return keys{base + stateSuffix, base + "}:window", base + "}:probes", base + "}:transitions", base + "}:policy"}
}

// fleetKeys names the fleet default's policy hash and the channel its
// changes go out on: one slot of their own, under the prefix. The tag
// cannot be a scope's, which is 64 hex digits.
func fleetKeys(prefix string) (policy, channel string) {
	base := prefix + layout + ":{fleet}"
	return base + ":policy", base + ":policy-changes"
}

// checkKeys name the key and the channel of Check's script (check.lua), in
// the fleet default's slot: nobody else uses either.
func checkKeys(prefix string) (key, channel string) {
	base := prefix + layout + ":{fleet}"
	return base + ":check", base + ":check"
}
