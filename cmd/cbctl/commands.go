package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// setup parses the flags, then connects; every command but watch and
// serve gets --timeout.
func (e *env) setup(ctx context.Context, args []string, want func(pos []string) error) (context.Context, context.CancelFunc, *cbredis.Coordinator, coordinator.Policy, []string, error) {
	pos, err := e.parse(args)
	if err == nil {
		err = want(pos)
	}
	var p coordinator.Policy
	if err == nil {
		p, err = e.policy()
	}
	if err != nil {
		return nil, nil, nil, p, nil, err
	}
	c, err := e.coordinator()
	if err != nil {
		return nil, nil, nil, p, nil, err
	}
	cancel := context.CancelFunc(func() {})
	if e.name != "watch" && e.name != "serve" {
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
	}
	return ctx, cancel, c, p, pos, nil
}

func oneScope(pos []string) error {
	if len(pos) != 1 {
		return usageErr("want one SCOPE, got %d arguments", len(pos))
	}
	return scopeArg(pos[0])
}

// scopeArg refuses a SCOPE no call can have, as the coordinator would,
// before anything is read or stored.
func scopeArg(scope string) error {
	if err := coordinator.CheckScope(scope); err != nil {
		return usageErr("SCOPE: %v", err)
	}
	return nil
}

func cmdList(ctx context.Context, e *env, args []string) error {
	e.flags()
	ctx, cancel, c, p, _, err := e.setup(ctx, args, func(pos []string) error {
		if len(pos) != 0 {
			return usageErr("list takes no argument, got %q", pos)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer cancel()
	list, err := c.List(ctx, p)
	if err != nil {
		return err
	}
	if e.json {
		out := make([]snapshotJSON, len(list))
		for i, s := range list {
			out[i] = toJSON(s)
		}
		err = writeJSON(e.stdout, out)
	} else {
		err = writeTable(e.stdout, list)
	}
	return cmp.Or(err, corruptErr(list))
}

// corruptErr is the error of a listing that holds corrupt scopes (nil
// when it holds none): each scope's error, after the listing was printed.
func corruptErr(list []coordinator.Snapshot) error {
	var errs []error
	for _, s := range list {
		if s.Corrupt != nil {
			errs = append(errs, s.Corrupt)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &cmdError{exitCorrupt, fmt.Errorf("%d listed as corrupt, their stored state unusable: %w", len(errs), errors.Join(errs...))}
}

func cmdShow(ctx context.Context, e *env, args []string) error {
	e.flags()
	ctx, cancel, c, p, pos, err := e.setup(ctx, args, oneScope)
	if err != nil {
		return err
	}
	defer cancel()
	s, err := snapshotOf(ctx, c, p, pos[0], false, "")
	if err != nil {
		return err
	}
	if e.json {
		return writeJSON(e.stdout, toJSON(s))
	}
	return writeDetail(e.stdout, s)
}

// cmdControl runs one of the operator's commands of coordinator.Controller.
func cmdControl(op string) func(ctx context.Context, e *env, args []string) error {
	return func(ctx context.Context, e *env, args []string) error {
		fs := e.flags()
		var n coordinator.Note
		reason := "why, for whoever looks at the breaker"
		if op == "isolate" || op == "disable" {
			reason += " (required)"
		}
		fs.StringVar(&n.Reason, "reason", "", reason)
		fs.StringVar(&n.By, "by", e.defaultBy(), "`NAME` of who acts, for the note ($CBCTL_BY, else $USER)")
		if op == "isolate" {
			fs.DurationVar(&n.For, "for", 0, "release by itself after this long (0: until released)")
		}
		create := fs.Bool("create", false, "act on a scope that has no state (never used, or idle for a window) instead of failing with exit status 3")
		e.replicaFlags(fs)
		ctx, cancel, c, p, pos, err := e.setup(ctx, args, func(pos []string) error {
			if err := oneScope(pos); err != nil {
				return err
			}
			if err := n.Validate(op); err != nil {
				return noteUsageErr(err)
			}
			return e.checkReplicaFlags()
		})
		if err != nil {
			return err
		}
		defer cancel()
		scope := pos[0]
		res, u, err := control(ctx, c, p, op, scope, n, *create)
		if err != nil {
			return err
		}
		if e.json {
			err = writeJSON(e.stdout, toResultJSON(scope, res, u))
		} else {
			fmt.Fprintln(e.stdout, resultLine(scope, res, u))
		}
		if err != nil {
			return err
		}
		return e.confirmed(res.Replicas)
	}
}

// noteUsageErr is a note that Validate refused, as a usage error naming
// the flag of the wrong field: --by, --reason or --for.
func noteUsageErr(err error) error {
	var ne *coordinator.NoteError
	if errors.As(err, &ne) && ne.Field != "" {
		return usageErr("--%s: %v", strings.ToLower(ne.Field), err)
	}
	return usageErr("%v", err)
}

// replicaFlags adds the flags that bound the wait for replicas after an
// operator's change: isolate, release, disable and enable take them, and
// serve, whose page makes the same changes.
func (e *env) replicaFlags(fs *flag.FlagSet) {
	fs.IntVar(&e.replicas, "replicas", 0, "replicas to wait for (0: as many as the master reports)")
	fs.DurationVar(&e.replicaTimeout, "replica-timeout", cbredis.DefaultReplicaTimeout, "bound on the wait for replicas, less than --timeout")
}

func (e *env) checkReplicaFlags() error {
	if e.replicas < 0 {
		return usageErr("--replicas %d: want 0 (as many as the master reports) or more", e.replicas)
	}
	if e.replicaTimeout < time.Millisecond || e.replicaTimeout >= e.timeout {
		return usageErr("--replica-timeout %v: want at least 1ms, and less than --timeout %v", e.replicaTimeout, e.timeout)
	}
	return nil
}

// snapshotOf reads scope's snapshot and, unless allow, refuses a scope
// that is not born with notFound(scope, hint): a command on it is most
// likely a mistyped scope, and a change stored for it (an isolation, an
// override) would stay in Redis for good while the real scope runs on
// without it.
func snapshotOf(ctx context.Context, c *cbredis.Coordinator, p coordinator.Policy, scope string, allow bool, hint string) (coordinator.Snapshot, error) {
	s, err := c.Snapshot(ctx, scope, p)
	if err == nil && s.Generation == 0 && !allow {
		err = notFound(scope, hint)
	}
	return s, err
}

// control makes one operator's change, op one of isolate, release,
// disable and enable, for the command of that name and for the
// dashboard's buttons alike. It refuses a scope that has no state unless
// create is set, and says what an isolate of an isolated breaker (a
// disable of a disabled one) replaced, since those make no transition.
func control(ctx context.Context, c *cbredis.Coordinator, p coordinator.Policy, op, scope string, n coordinator.Note, create bool) (coordinator.Result, update, error) {
	before, err := snapshotOf(ctx, c, p, scope, create, fmt.Sprintf("; check the name with cbctl list, or give --create to %s it anyway", op))
	if err != nil {
		return coordinator.Result{}, update{}, err
	}
	var res coordinator.Result
	switch op {
	case "isolate":
		res, err = c.Isolate(ctx, coordinator.CommandRequest{Scope: scope, Policy: p, Note: n})
	case "release":
		res, err = c.Release(ctx, coordinator.CommandRequest{Scope: scope, Policy: p, Note: n})
	case "disable":
		res, err = c.Disable(ctx, coordinator.CommandRequest{Scope: scope, Policy: p, Note: n})
	case "enable":
		res, err = c.Enable(ctx, coordinator.CommandRequest{Scope: scope, Policy: p, Note: n})
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	if err != nil {
		return res, update{}, err
	}
	var u update
	if (res.Transition == nil || res.Transition.From == res.Transition.To) && (op == "isolate" || op == "disable") {
		// Isolate of an isolated breaker and disable of a disabled one
		// replace the note (and the end) in the same state: no
		// transition, or isolated -> isolated when the end moved (so
		// that replicas hear it). The coordinator does not say what it
		// replaced, the breaker does.
		after, err := c.Snapshot(ctx, scope, p)
		if err != nil {
			return res, u, fmt.Errorf("%s made no transition; reading back the note it replaced: %w", op, err)
		}
		u = updated(before, after)
	}
	return res, u, nil
}

// confirmed tells the operator how far a change reached the replicas: a
// note when some did not confirm it, and an error with its own exit code
// when none did, since a failover would then lose it.
func (e *env) confirmed(r coordinator.Replication) error {
	switch {
	case r.Confirmed >= r.Wanted:
		return nil
	case r.Confirmed == 0:
		return &cmdError{exitUnconfirmed, fmt.Errorf("warning: not confirmed by any replica (0 of %d within %v): "+
			"the change is in force on the master, but a failover now would lose it; run the command again once the replicas are back",
			r.Wanted, e.replicaTimeout)}
	}
	fmt.Fprintf(e.stderr, "cbctl: %s: note: confirmed by %d of %d replicas within %v; a failover to another may lose it\n",
		e.name, r.Confirmed, r.Wanted, e.replicaTimeout)
	return nil
}
