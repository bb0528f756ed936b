package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// A scope's override lives in its slot (keys.go, keyPolicy), so that every
// script reads its version for the reply at the cost of one HGET; the
// fleet default lives in a slot of its own (fleetKeys). Neither expires: a
// reset keeps the hash with no override, so that versions keep growing.

// policyTries bounds how often a change is read again after another
// operator's change came in between; each try is two round trips.
const policyTries = 8

// SetOverride implements [coordinator.Controller] with policy.lua.
func (c *Coordinator) SetOverride(ctx context.Context, t coordinator.Target, o coordinator.Override, n coordinator.Note) (coordinator.Overrides, error) {
	return c.changeOverride(ctx, "set override", t, func(cur coordinator.Override) coordinator.Override { return cur.Merge(o) }, n)
}

// ResetOverride implements [coordinator.Controller].
func (c *Coordinator) ResetOverride(ctx context.Context, t coordinator.Target, n coordinator.Note) (coordinator.Overrides, error) {
	return c.changeOverride(ctx, "reset override", t, func(coordinator.Override) coordinator.Override { return nil }, n)
}

// changeOverride reads t's override, makes the change, checks it and has
// policy.lua store it if nobody changed it meanwhile, else tries again.
func (c *Coordinator) changeOverride(ctx context.Context, op string, t coordinator.Target, change func(coordinator.Override) coordinator.Override, n coordinator.Note) (coordinator.Overrides, error) {
	fail := func(err error) (coordinator.Overrides, error) {
		return coordinator.Overrides{}, fmt.Errorf("redis coordinator: %s of %v: %w", op, t, err)
	}
	if err := n.Validate("override"); err != nil {
		return fail(err)
	}
	key, channel := c.policyKeys(t)
	// The change and WAIT go on one connection, as for control.
	var rdb goredis.Scripter = c.client
	conn, err := c.masterConn(ctx, key)
	if err != nil {
		return fail(err)
	}
	if conn != nil {
		defer conn.Close()
		rdb = conn
	}
	for range policyTries {
		cur, err := c.readOverrides(ctx, t)
		if err != nil {
			return fail(err)
		}
		mine := &cur.Scope
		if t.Fleet {
			mine = &cur.Fleet
		}
		next := change(mine.Override)
		if err := implement.CheckOverride(t, next, cur.Fleet.Override); err != nil {
			return fail(err)
		}
		now := ""
		if c.clock != nil {
			now = strconv.FormatInt(c.clock().UnixMilli(), 10)
		}
		set, err := c.scriptSet(ctx)
		if err != nil {
			return fail(err)
		}
		reply, err := set.policy.Run(ctx, rdb, []string{key, channel},
			now, strconv.FormatUint(mine.Version, 10), next.String(), n.By, n.Reason).Slice()
		if err != nil {
			return fail(err)
		}
		p := readPairs(reply)
		outcome := p.int("outcome")
		stored, err := readLayer([]any{p.str("override"), p.str("version"), p.str("by"), p.str("reason"), p.str("at")})
		if p.err != nil || err != nil {
			return fail(errors.Join(p.err, err))
		}
		if outcome < 0 {
			continue
		}
		*mine = stored
		if outcome == 1 && conn != nil {
			if cur.Replicas, err = c.waitForReplicas(ctx, conn); err != nil {
				return fail(fmt.Errorf("done on the master, but waiting for its replicas failed: %w", err))
			}
		}
		return cur, nil
	}
	return fail(fmt.Errorf("changed by others %d times while this change was being made; try again", policyTries))
}

// policyKeys are t's policy hash and the channel its changes go out on.
func (c *Coordinator) policyKeys(t coordinator.Target) (key, channel string) {
	if t.Fleet {
		return fleetKeys(c.prefix)
	}
	k := scopeKeys(c.prefix, t.Scope)
	return k[keyPolicy], k[keyChannel]
}

// Overrides implements [coordinator.Controller]: the fleet default and,
// for a scope, its override, a read each (they live in different slots).
func (c *Coordinator) Overrides(ctx context.Context, t coordinator.Target) (coordinator.Overrides, error) {
	o, err := c.readOverrides(ctx, t)
	if err != nil {
		return coordinator.Overrides{}, fmt.Errorf("redis coordinator: overrides of %v: %w", t, err)
	}
	return o, nil
}

// readOverrides reads the fleet default and, unless t is the fleet
// default, t's scope's override.
func (c *Coordinator) readOverrides(ctx context.Context, t coordinator.Target) (o coordinator.Overrides, err error) {
	fleet, _ := fleetKeys(c.prefix)
	if o.Fleet, err = c.readStored(ctx, fleet); err != nil || t.Fleet {
		return o, err
	}
	key, _ := c.policyKeys(t)
	o.Scope, err = c.readStored(ctx, key)
	return o, err
}

// readStored reads the policy hash at key; a missing hash is no layer.
func (c *Coordinator) readStored(ctx context.Context, key string) (coordinator.PolicyLayer, error) {
	v, err := c.client.HMGet(ctx, key, "override", "version", "by", "reason", "at").Result()
	if err != nil {
		return coordinator.PolicyLayer{}, err
	}
	if v[1] == nil {
		return coordinator.PolicyLayer{}, nil
	}
	for i := range v {
		if v[i] == nil {
			v[i] = ""
		}
	}
	l, err := readLayer(v)
	if err != nil {
		return l, fmt.Errorf("%s: %w", key, err)
	}
	return l, nil
}

// readLayer reads {override, version, by, reason, at ms} as policy.lua
// and HMGET give them; what does not read is junk in the policy hash
// (errReply, so coordinator.ErrCorruptState).
func readLayer(v []any) (coordinator.PolicyLayer, error) {
	var r replyReader
	text, by, reason := r.str(v, 0), r.str(v, 2), r.str(v, 3)
	version, err1 := strconv.ParseUint(r.str(v, 1), 10, 64)
	at, err2 := strconv.ParseInt(r.str(v, 4), 10, 64)
	if err := errors.Join(r.err, err1, err2); err != nil {
		return coordinator.PolicyLayer{}, fmt.Errorf("%w: policy layer %q", errReply, v)
	}
	o, err := coordinator.ParseOverride(strings.Fields(text)...)
	if err != nil {
		return coordinator.PolicyLayer{}, fmt.Errorf("%w: override %q: %w", errReply, text, err)
	}
	if len(o) == 0 {
		o = nil
	}
	l := coordinator.PolicyLayer{Override: o, Version: version, By: by, Reason: reason}
	if at != 0 {
		l.At = time.UnixMilli(at)
	}
	return l, nil
}

var _ coordinator.PolicyWatch = (*watch)(nil)

// FollowPolicies implements [coordinator.PolicyWatch]: it subscribes to
// the fleet default's channel as well (policy.lua publishes a scope's
// changes on its transitions channel), and f runs on the goroutine that
// reads the subscription of the node that published the change.
func (w *watch) FollowPolicies(ctx context.Context, f func(coordinator.PolicyChange)) error {
	w.following.Lock()
	defer w.following.Unlock()
	if err := w.failed(); err != nil {
		return err
	}
	_, fleet := fleetKeys(w.c.prefix)
	w.mu.Lock()
	w.policies, w.fleet = f, fleet
	w.mu.Unlock()
	if err := w.subscribe(ctx, fleet); err != nil {
		return fmt.Errorf("redis coordinator: watch the fleet default: %w", err)
	}
	return nil
}

// policyChanged hands a change published on ch ("policy <version>") to
// the follower of policies, if the Watch follows ch's scope or ch is the
// fleet default's, and counts one with no version as foreign.
func (w *watch) policyChanged(ch, version string) {
	w.mu.Lock()
	f, scope, followed := w.policies, "", ch == w.fleet
	if !followed {
		scope, followed = w.scopes[ch]
	}
	w.mu.Unlock()
	if f == nil || !followed {
		return
	}
	v, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		// Not from a script of ours (see IgnoredMessages).
		w.c.foreign.Add(1)
		return
	}
	t := coordinator.FleetDefault
	if ch != w.fleet {
		t = coordinator.ScopeTarget(scope)
	}
	f(coordinator.PolicyChange{Target: t, Version: v})
}
