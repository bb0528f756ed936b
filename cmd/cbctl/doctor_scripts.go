package main

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

//go:embed doctor.lua
var doctorLua string

var doctorScript = goredis.NewScript(doctorLua)

// checkScripts runs doctor.lua with EVAL, then with EVALSHA, as the
// coordinator runs its scripts (EVALSHA, and EVAL when the server answers
// NOSCRIPT), and names what either refuses, inside the script too.
func (d *doctor) checkScripts(ctx context.Context, n *goredis.Client) {
	const check = "scripts"
	fix := "grant +eval +evalsha +time +info (docs/redis-acl.md)"
	if _, err := doctorScript.Eval(ctx, n, nil).Result(); err != nil {
		d.add(check, d.node(n), statusFail, "EVAL refused: "+err.Error(), fix)
		return
	}
	refused, err := doctorScript.EvalSha(ctx, n, nil).StringSlice()
	switch {
	case err != nil:
		d.add(check, d.node(n), statusFail, "EVALSHA refused: "+err.Error(), fix)
	case len(refused) > 0:
		d.add(check, d.node(n), statusFail, fmt.Sprintf("EVAL and EVALSHA run, but a script may not call %s", strings.Join(refused, ", ")),
			"grant +"+strings.ToLower(strings.Join(refused, " +"))+" (docs/redis-acl.md): Redis checks what a script calls against the caller's ACL")
	default:
		d.add(check, d.node(n), statusOK, "EVAL and EVALSHA run; TIME and INFO inside a script too", "")
	}
}

// checkReady runs the coordinator's own start-up check, the one
// Breaker.Ready runs: a script as the operations run theirs, and on
// Redis 7 the ACL asked about every command they run.
func (d *doctor) checkReady(ctx context.Context) {
	const check = "ready"
	if err := d.c.Check(ctx); err != nil {
		d.add(check, "", statusFail, err.Error(), "the services' Breaker.Ready fails the same way: fix what it names (docs/redis-acl.md for a grant)")
		return
	}
	d.add(check, "", statusOK, "the coordinator's Check, which Breaker.Ready runs, passed", "")
}
