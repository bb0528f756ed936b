// Command cbctl shows and controls the circuit breakers that cbgrpc keeps
// in Redis, for the whole fleet at once: list every breaker, show one,
// isolate (force open) or disable (force closed) it, put it back, and
// watch transitions as they happen.
//
// Usage:
//
//	cbctl [flags] COMMAND [flags] [args]
//
//	cbctl list                                   every breaker, as a table
//	cbctl show SCOPE                             one breaker
//	cbctl isolate SCOPE --reason TEXT [--for D]  reject every call (until --for passed, or release)
//	cbctl release SCOPE [--reason TEXT]          back to closed, new generation, empty window
//	cbctl disable SCOPE --reason TEXT            admit every call, never trip
//	cbctl enable SCOPE [--reason TEXT]           back under the rules
//	cbctl policy show SCOPE|--default            the overrides of the policy, and what Records carried
//	cbctl policy set SCOPE|--default F=V...      merge fields into the override (F= removes one)
//	cbctl policy reset SCOPE|--default           remove the override
//	cbctl watch [SCOPE...]                       print transitions as they happen
//	cbctl serve [--listen HOST:PORT]             a live dashboard of every breaker, in a browser
//	cbctl doctor [--fleet N] [--replicas N]      what the Redis lacks for cbgrpc, and what to change
//	cbctl help [COMMAND]                         help, on standard output
//	cbctl --version                              the version cbctl was built from
//
// Flags go after the command, before or after its arguments ("--" ends
// them, for a scope that starts with "-"); the flags every command takes
// may also come before the command ("cbctl --addr HOST:PORT list"):
//
//	--addr HOST:PORT[,HOST:PORT...]  Redis address; seeds with --cluster (default $CBCTL_REDIS_ADDR or 127.0.0.1:6379)
//	--cluster                        Redis Cluster
//	--sentinel HOST:PORT[,...]       Sentinels, instead of --addr (default $CBCTL_REDIS_SENTINEL)
//	--master NAME                    the master the Sentinels monitor (default $CBCTL_REDIS_MASTER)
//	--tls                            TLS; --tls-ca FILE and --tls-server-name NAME tune it
//	--prefix P                       key prefix the fleet's coordinator uses (default "cbgrpc:")
//	--window D, --buckets N          the fleet's Policy.Window and Policy.Buckets (default 30s, 10)
//	--timeout D                      bound on each command but watch (default 10s)
//	--json                           JSON instead of a table: one object, or one per line for watch
//
// and isolate, release, disable and enable also take:
//
//	--reason TEXT                    why, for the note (required by isolate and disable)
//	--by NAME                        who is acting, for the note (default $CBCTL_BY or $USER)
//	--for D                          isolate only: the isolation ends by itself after D
//	--create                         act on a scope that has no state (see exit status 3)
//	--replicas N                     replicas to wait for (default 0: as many as the master reports)
//	--replica-timeout D              bound on the wait for replicas (default 1s, less than --timeout)
//
// and policy set and reset take --reason and --by as well, and policy set
// takes --create. The fleet default (--default) applies to every scope of
// --prefix; Breakers lay it, then the scope's override, over their code's
// policy. Fields are named as in Go (FailureRatio) or in snake case
// (failure_ratio).
//
// and serve, which serves one page showing every breaker live, and whose
// buttons isolate, release, disable and enable through the same code as
// the commands, also takes:
//
//	--listen HOST:PORT               where to serve it (default 127.0.0.1:8080); beyond loopback it needs a token
//	--token TOKEN                    every request must carry it (default $CBCTL_SERVE_TOKEN)
//	--read-only                      the page without its buttons; changes are refused
//	--refresh D                      how often the window counts are read while a page is open (default 2s)
//	--failure-ratio RATIO            the fleet's Policy.FailureRatio, shown as the threshold (default 0.5)
//	--min-calls N                    the fleet's Policy.MinCalls, shown with it (default 20)
//	--replicas N, --replica-timeout D  as for isolate, for the page's buttons
//
// serve ends with status 0 on SIGINT or SIGTERM, closing the pages' event
// streams and the transition feed.
//
// and doctor, which checks what cbgrpc needs of the Redis and prints one
// line per check, ok, warn, FAIL or skip, with what to change (see
// docs/doctor.md), also takes:
//
//	--fleet N                        replicas of the services that will share the Redis, against maxclients
//	--coordinator-timeout D          the services' coordinator timeout, against the round trip (default 50ms)
//	--user NAME                      the ACL user whose grant ACL DRYRUN checks (default: cbctl's own)
//	--replicas N, --replica-timeout D  the replicas WAIT must confirm, as for isolate
//
// "cbctl --help", "cbctl help COMMAND" and "cbctl COMMAND --help" print
// help on standard output and exit 0; a usage error prints one line on
// standard error and exits 2.
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
// A scope has no state when no breaker holds any for it: never used, or
// idle for longer than the window (its closed state expired), or its
// isolation for a set time ended. show reports such a scope as not found;
// isolate, release, disable and enable refuse it unless --create is given,
// since acting on it is most likely a typo, and an isolation of a mistyped
// scope would stay in Redis for good while the real one keeps failing.
//
// Isolating an isolated breaker, or disabling a disabled one, makes no
// transition but replaces the note (and for isolate the end): cbctl then
// says what it replaced ("updated: ... note ... -> ...", and in --json
// "updated": {"note": {"from": ..., "to": ...}, "open_until": {...}}).
//
// Exit status: 0 done (also when the breaker was already in the state
// asked for); 1 an operational error (Redis unreachable, a script failed,
// watch refused by Redis); 2 a usage error (unknown command or flag, a
// missing argument, a missing --reason, a bad --for), or a policy override
// that would not work, which is not stored; 3 show, isolate, release,
// disable or enable of a scope that has no state (the last four unless
// --create is given), and policy show or set of a scope that has no
// override either (set unless --create is given); 4 isolate, release, disable or enable whose
// change no replica confirmed (the change is in force on the master, but
// a failover would lose it: run the command again once the replicas are
// back); 5 list that found scopes whose stored state is unusable (junk in
// their keys): it lists the others as usual and those with state
// "corrupt" (in --json also "corrupt": the error), and says why on
// standard error. 6 doctor that found warnings and no failure; 7
// doctor that found a failure, an unreachable Redis included. Errors go to standard error as one line "cbctl: COMMAND: ...". A
// change that some replicas confirmed and others did not exits 0 with a
// note on standard error.
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
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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
	// exitCorrupt: list found scopes whose stored state cannot be read,
	// and listed them as corrupt beside the others.
	exitCorrupt = 5
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

// notFound is the error of a command on a scope that has no state; hint
// says what to do about it.
func notFound(scope, hint string) error {
	return &cmdError{exitNotFound, fmt.Errorf("scope %s not found: no breaker holds state for it "+
		"(never used, idle for longer than the window, or its isolation ended)%s", quoteScope(scope), hint)}
}

// command is one of cbctl's commands.
type command struct {
	name  string
	args  string // what follows the name in the synopsis: "SCOPE --reason TEXT [--for D]"
	brief string
	run   func(ctx context.Context, e *env, args []string) error
}

var commands = []*command{
	{"list", "", "every breaker, as a table", cmdList},
	{"show", "SCOPE", "one breaker", cmdShow},
	{"isolate", "SCOPE --reason TEXT [--for D]", "reject every call until released (or for D)", cmdControl("isolate")},
	{"release", "SCOPE [--reason TEXT]", "back to closed, new generation, empty window", cmdControl("release")},
	{"disable", "SCOPE --reason TEXT", "admit every call, never trip", cmdControl("disable")},
	{"enable", "SCOPE [--reason TEXT]", "back under the rules", cmdControl("enable")},
	{"policy", "show|set|reset SCOPE|--default", "the policy override of a scope, or the fleet default", cmdPolicy},
	{"watch", "[SCOPE...]", "print transitions as they happen", cmdWatch},
	{"serve", "[--listen HOST:PORT]", "a live dashboard of every breaker, in a browser", cmdServe},
	{"doctor", "[--fleet N] [--replicas N]", "check what cbgrpc needs of this Redis, and say what to change", cmdDoctor},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run runs one command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	// The flags every command takes may come before the command too; the
	// command parses them again, with its own.
	g := &env{stdout: stdout, stderr: stderr, getenv: getenv}
	fs := g.flags()
	showVersion := fs.Bool("version", false, "print the version cbctl was built from")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(stdout, fs)
			return exitOK
		}
		fmt.Fprintf(stderr, "cbctl: %s (before the command go the flags every command takes; see cbctl --help)\n", flagError(err))
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintf(stdout, "cbctl %s\n", version())
		return exitOK
	}
	rest := fs.Args()
	lead := args[: len(args)-len(rest) : len(args)-len(rest)]
	if n := len(lead); n > 0 && lead[n-1] == "--" {
		lead = lead[:n-1]
	}
	if len(rest) == 0 {
		writeUsage(stderr, fs)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		switch {
		case len(rest) == 0:
			writeUsage(stdout, fs)
			return exitOK
		case len(rest) == 1 && lookup(rest[0]) != nil:
			name, rest = rest[0], []string{"--help"}
		default:
			fmt.Fprintf(stderr, "cbctl: help: unknown command %q (see cbctl --help)\n", strings.Join(rest, " "))
			return exitUsage
		}
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "cbctl: unknown command %q (see cbctl --help)\n", name)
		return exitUsage
	}
	e := &env{name: name, cmd: cmd, stdout: stdout, stderr: stderr, getenv: getenv}
	err := cmd.run(ctx, e, append(lead, rest...))
	if e.client != nil {
		e.client.Close()
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "cbctl: %s: %s\n", name, escapeLines(err.Error()))
	var ce *cmdError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitError
}
