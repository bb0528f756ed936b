// Command cbctl shows and controls the circuit breakers that cbgrpc keeps
// in Redis, for the whole fleet at once: list every breaker, show one,
// isolate (force open) or disable (force closed) it, put it back, and
// watch transitions as they happen.
//
// Usage:
//
//	cbctl list                                   every breaker, as a table
//	cbctl show SCOPE                             one breaker
//	cbctl isolate SCOPE --reason TEXT [--for D]  reject every call (until --for passed, or release)
//	cbctl release SCOPE [--reason TEXT]          back to closed, new generation, empty window
//	cbctl disable SCOPE --reason TEXT            admit every call, never trip
//	cbctl enable SCOPE [--reason TEXT]           back under the rules
//	cbctl watch [SCOPE...]                       print transitions as they happen
//
// Flags go after the command, before or after its arguments ("--" ends
// them, for a scope that starts with "-"):
//
//	--addr HOST:PORT[,HOST:PORT...]  Redis address; seeds with --cluster (default $CBCTL_REDIS_ADDR or 127.0.0.1:6379)
//	--cluster                        Redis Cluster
//	--sentinel HOST:PORT[,...]       Sentinels, instead of --addr (default $CBCTL_REDIS_SENTINEL)
//	--master NAME                    the master the Sentinels monitor (default $CBCTL_REDIS_MASTER)
//	--tls                            TLS; --tls-ca FILE and --tls-server-name NAME tune it
//	--prefix P                       key prefix the fleet's coordinator uses (default "cbgrpc:")
//	--window D, --buckets N          the fleet's Policy.Window and Policy.Buckets (default 30s, 10)
//	--by NAME                        who is acting, for the note (default $CBCTL_BY or $USER)
//	--timeout D                      bound on each command but watch (default 10s)
//	--replicas N                     isolate, release, disable, enable: replicas to wait for (default 0: as many as the master reports)
//	--replica-timeout D              isolate, release, disable, enable: bound on the wait for replicas (default 1s, less than --timeout)
//	--json                           JSON instead of a table: one object, or one per line for watch
//
// With Sentinels, cbctl asks them for the master and acts on it; the
// --sentinel flag beats $CBCTL_REDIS_ADDR, and --addr beats
// $CBCTL_REDIS_SENTINEL. --sentinel goes with neither --addr nor --cluster.
//
// The Redis username and password come from $CBCTL_REDIS_USERNAME and
// $CBCTL_REDIS_PASSWORD, never from flags, which other users can read
// from the process list.
//
// --window and --buckets must be those of the fleet's policy: the window
// counts are read over time buckets of Window/Buckets, and a closed state
// that an operator puts back is kept for one window. The other fields of
// the policy do not matter to cbctl.
//
// Exit status: 0 done (also when the breaker was already in the state
// asked for); 1 an operational error (Redis unreachable, a script failed,
// the watch feed was lost); 2 a usage error (unknown command or flag, a
// missing argument, a missing --reason, a bad --for); 3 show, release or
// enable of a scope that has no state; 4 isolate, release, disable or
// enable whose change no replica confirmed (the change is in force on the
// master, but a failover would lose it: run the command again once the
// replicas are back). Errors go to standard error as one line
// "cbctl: COMMAND: ...". A change that some replicas confirmed and others
// did not exits 0 with a note on standard error.
//
// Durability: after isolate, release, disable and enable, cbctl waits up
// to --replica-timeout for the master's replicas to have the change
// (Redis WAIT) and says whether they did; --json gives the counts as
// "replicas": {"wanted": N, "confirmed": M}. A Redis with no replica has
// nothing to wait for.
//
// In tables a scope is printed as is when it is printable and holds no
// space, otherwise as a Go-quoted string; JSON holds it as is.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	goredis "github.com/redis/go-redis/v9"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Exit codes; see the package documentation.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	// exitUnconfirmed: the change was made on the master, but no replica
	// confirmed it.
	exitUnconfirmed = 4
)

func main() {
	// go-redis would log connection trouble on stderr, which belongs to
	// cbctl's own one-line errors.
	goredis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// cmdError carries the exit code of a failed command other than 1.
type cmdError struct {
	code int
	err  error
}

func (e *cmdError) Error() string { return e.err.Error() }

func usageErr(format string, args ...any) error {
	return &cmdError{exitUsage, fmt.Errorf(format, args...)}
}

func notFound(scope string) error {
	return &cmdError{exitNotFound, fmt.Errorf("scope %s not found", quoteScope(scope))}
}

var commands = map[string]func(ctx context.Context, e *env, args []string) error{
	"list":    cmdList,
	"show":    cmdShow,
	"isolate": cmdControl("isolate"),
	"release": cmdControl("release"),
	"disable": cmdControl("disable"),
	"enable":  cmdControl("enable"),
	"watch":   cmdWatch,
}

const usage = `usage: cbctl COMMAND [flags] [args]

commands:
  list                                   every breaker, as a table
  show SCOPE                             one breaker
  isolate SCOPE --reason TEXT [--for D]  reject every call until released (or for D)
  release SCOPE [--reason TEXT]          back to closed, new generation, empty window
  disable SCOPE --reason TEXT            admit every call, never trip
  enable SCOPE [--reason TEXT]           back under the rules
  watch [SCOPE...]                       print transitions as they happen

Run "cbctl COMMAND --help" for the flags. Exit status: 0 ok, 1 error,
2 usage, 3 scope not found, 4 change not confirmed by any replica.
`

// run runs one command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name := args[0]
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "cbctl: unknown command %q\n%s", name, usage)
		return exitUsage
	}
	e := &env{name: name, stdout: stdout, stderr: stderr, getenv: getenv}
	err := cmd(ctx, e, args[1:])
	if e.client != nil {
		e.client.Close()
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "cbctl: %s: %v\n", name, err)
	var ce *cmdError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitError
}
