package redis

import (
	"encoding/hex"
	"strings"
)

// The scripts keep replica IDs in fields that "|" parts (replicas.lua):
// an ID with one, or one that could be read as escaped, goes to them
// escaped, as "~" and its bytes in hex.

// replicaArg is id as the scripts take it.
func replicaArg(id string) string {
	if strings.ContainsRune(id, '|') || strings.HasPrefix(id, "~") {
		return "~" + hex.EncodeToString([]byte(id))
	}
	return id
}

// replicaOf is the ID a script gave back.
func replicaOf(arg string) string {
	if raw, ok := strings.CutPrefix(arg, "~"); ok {
		if b, err := hex.DecodeString(raw); err == nil {
			return string(b)
		}
	}
	return arg
}
