package redis

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// luaGlobals are the globals Redis gives a script; a script may read no
// other and set none.
var luaGlobals = []string{"redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct"}

// knownLint is what luacheck finds in the assembled scripts today: helpers
// of a shared part (write.lua, lib.lua, state.lua) that the operation
// does not use, and locals of admit.lua and record.lua that later parts'
// parameters shadow. Each is a line "script: (code) message". The list is
// exact, so that a new finding fails the test and a fixed one must be
// struck from it: it only shrinks, towards scripts assembled from what each
// operation uses (issue: every script a readable whole).
var knownLint = []string{
	"admit: (W211) unused function 'open'",
	"admit: (W211) unused function 'reopen_for'",
	"admit: (W211) unused function 'seen_policies'",
	"admit: (W211) unused function 'tripped'",
	"admit: (W211) unused function 'window'",
	"admit: (W211) unused variable 'RECORD_FIELDS'",
	"admit: (W431) shadowing upvalue 's' on line N",
	"control: (W211) unused function 'hdel'",
	"control: (W211) unused function 'open'",
	"control: (W211) unused function 'reopen_for'",
	"control: (W211) unused function 'seen_policies'",
	"control: (W211) unused function 'tripped'",
	"control: (W211) unused function 'window'",
	"control: (W211) unused variable 'RECORD_FIELDS'",
	"push: (W211) unused function 'hdel'",
	"push: (W211) unused function 'reopen_for'",
	"push: (W211) unused function 'seen_policies'",
	"push: (W211) unused variable 'RECORD_FIELDS'",
	"record: (W211) unused variable 'STATE_FIELDS'",
	"record: (W431) shadowing upvalue 'raw' on line N",
	"settle: (W211) unused function 'hdel'",
	"settle: (W211) unused function 'seen_policies'",
	"settle: (W211) unused function 'window'",
	"settle: (W211) unused variable 'RECORD_FIELDS'",
	"snapshot: (W211) unused function 'encode_state'",
	"snapshot: (W211) unused variable 'ENDED'",
	"snapshot: (W211) unused variable 'GC_MARGIN'",
	"snapshot: (W211) unused variable 'IDX'",
	"snapshot: (W211) unused variable 'NOTE_FIELDS'",
	"snapshot: (W211) unused variable 'RECORD_FIELDS'",
	"snapshot: (W211) unused variable 'SCOPE'",
	"snapshot: (W311) value assigned to variable 'SEEN' is unused",
}

var (
	lintLine = regexp.MustCompile(`^([a-z]+)\.lua:\d+:\d+: (.*)$`)
	lineRef  = regexp.MustCompile(`on line \d+`)
)

// TestScriptsLoadAndLint loads every script, as assembled for a single
// server and for a Cluster, into a real server (SCRIPT LOAD compiles it
// with Redis's own Lua), then lints each whole with luacheck: no global but Redis's
// is read or set, and the unused locals and shadowings are knownLint's.
func TestScriptsLoadAndLint(t *testing.T) {
	luacheck := redistest.Tool(t, "luacheck")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	dir := t.TempDir()
	ctx := context.Background()
	var found []string
	for _, set := range []*scripts{plainScripts, shardedScripts} {
		for name, src := range set.sources {
			if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
				t.Errorf("SCRIPT LOAD %s: %v", name, err)
			}
			if set == shardedScripts {
				continue // the same text but its first line
			}
			if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	args := []string{"--std", "lua51", "--globals"}
	args = append(args, luaGlobals...)
	args = append(args, "--no-max-line-length", "--codes", "--formatter", "plain", "--no-color", "--")
	names, _ := filepath.Glob(filepath.Join(dir, "*.lua"))
	cmd := exec.Command(luacheck, append(args, names...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if len(out) == 0 && err != nil {
		t.Fatalf("luacheck: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		m := lintLine.FindStringSubmatch(strings.TrimPrefix(line, dir+"/"))
		if m == nil {
			t.Fatalf("luacheck says %q", line)
		}
		found = append(found, m[1]+": "+lineRef.ReplaceAllString(m[2], "on line N"))
	}
	for _, f := range found {
		if strings.Contains(f, "global") {
			t.Errorf("%s: a script may use no global but %v", f, luaGlobals)
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	for _, f := range found {
		if !slices.Contains(knownLint, f) {
			t.Errorf("luacheck finds %q, not in knownLint", f)
		}
	}
	for _, k := range knownLint {
		if !slices.Contains(found, k) {
			t.Errorf("knownLint has %q, which luacheck no longer finds: strike it", k)
		}
	}
}
