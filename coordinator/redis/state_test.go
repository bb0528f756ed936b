package redis

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
)

var updateLua = flag.Bool("update-lua", false, "rewrite state.lua from stateFields")

// A stateField is a field of the state hash that the scripts read and
// write at once: as text or as an integer, and as zero (a Lua value; ""
// for nil) when the hash lacks it.
type stateField struct {
	name    string
	integer bool
	zero    string
}

// stateFields are the breaker's fields in the state hash, the one list of
// them; state.lua is written from it.
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

const stateLuaHeader = `-- state.lua: the breaker's fields in the state hash, and the functions that
-- turn them into a state and back. Written by TestStateLuaIsStateFields
-- (go test -run TestStateLuaIsStateFields -update-lua) from stateFields in
-- state_test.go; do not edit by hand. After lib.lua, before read.lua.
-- Field by field, not a loop over the list: a loop costs a calm Record more
-- (bench/RESULTS.md).

`

// stateLuaOf writes state.lua: STATE_FIELDS, the fields stored reads for
// every script but Record; RECORD_FIELDS, those and batchFields; and
// decode_state(v), the state of v, what HMGET of either returned, and
// encode_state(s, ...), the fields and values of stateFields in s for
// HSET, then the arguments that follow.
func stateLuaOf(state, batches []stateField) string {
	names := func(fs []stateField) string {
		q := make([]string, len(fs))
		for i, f := range fs {
			q[i] = quote(f.name)
		}
		return "{" + strings.Join(q, ", ") + "}"
	}
	all := append(state[:len(state):len(state)], batches...)
	var b strings.Builder
	b.WriteString(stateLuaHeader)
	b.WriteString("local STATE_FIELDS = " + names(state) + "\n")
	b.WriteString("local RECORD_FIELDS = " + names(all) + "\n\n")
	b.WriteString("local function decode_state(v)\n  return {\n")
	for i, f := range all {
		v := "v[" + strconv.Itoa(i+1) + "]"
		if f.integer {
			v = "stored_int('state', " + quote(f.name) + ", " + v + ")"
		}
		if f.zero != "" {
			v += " or " + f.zero
		}
		b.WriteString("    " + f.name + " = " + v + ",\n")
	}
	b.WriteString("  }\nend\n\nlocal function encode_state(s, ...)\n  return\n")
	for _, f := range state {
		v := "s." + f.name
		if f.zero != "" {
			v = "(" + v + " or " + f.zero + ")"
		}
		if f.integer {
			v = "int(" + v + ")"
		}
		b.WriteString("    " + quote(f.name) + ", " + v + ",\n")
	}
	b.WriteString("    ...\nend\n")
	return b.String()
}

func TestStateLuaIsStateFields(t *testing.T) {
	want := stateLuaOf(stateFields, batchFields)
	if *updateLua {
		if err := os.WriteFile("state.lua", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if stateLua != want {
		t.Errorf("state.lua is not what stateFields make; run go test -run TestStateLuaIsStateFields -update-lua ./coordinator/redis\nwant:\n%s", want)
	}
}
