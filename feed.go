package cbgrpc

import (
	"context"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// feedRetry is how long the feed waits before opening a new connection
// after one that failed to open or lived less than this; meanwhile every
// admission asks the coordinator. A connection that lived longer is
// replaced at once: a failover ends it, and the new master is there.
const feedRetry = time.Second

// feed keeps a connection to the coordinator's transition feed open while
// the Breaker lives: it follows every scope of the table (and unfollows
// those the table forgets), and hands every transition it hears to the
// table like any other answer. The table trusts an answer for admissions
// only while the connection that followed its scope lives; when one breaks,
// the next starts over. Every transition also goes to tell, to be
// counted and passed to the callback of [WithOnTransition].
type feed struct {
	w    coordinator.Watcher
	k    *knowledge
	tell func(coordinator.Transition) // every transition, after the table learned it
	lost func(error)                  // a connection could not be opened, or broke
	// share hears the changes of overrides; nil when the coordinator
	// stores none.
	share *sharing
	// epochs numbers the connections, from 1; only run touches it.
	epochs uint64
	// closing counts the connections being closed: closing one may wait
	// for a coordinator that stopped answering, and the next need not.
	closing sync.WaitGroup
}

// run keeps connections going until ctx ends, and returns once every
// connection is closed.
func (f *feed) run(ctx context.Context) {
	defer f.closing.Wait()
	for {
		start := time.Now()
		f.serve(ctx)
		wait := feedRetry - time.Since(start)
		if ctx.Err() != nil {
			return
		}
		if wait <= 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// serve runs one connection until it breaks or ctx ends.
func (f *feed) serve(ctx context.Context) {
	watch, err := f.w.Watch(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.lost(err)
		}
		return
	}
	f.closing.Add(1)
	defer func() {
		go func() {
			defer f.closing.Done()
			watch.Close()
		}()
	}()
	if f.share != nil {
		pw, ok := watch.(coordinator.PolicyWatch)
		if !ok {
			f.share.deafFeed(watch)
		} else if err := pw.FollowPolicies(ctx, f.share.heard); err != nil {
			if ctx.Err() == nil {
				f.lost(err)
			}
			return
		}
		// What changed while no connection listened was not heard.
		f.share.fleetChanged()
	}
	f.epochs++
	epoch := f.epochs
	if scopes := f.k.all(); len(scopes) > 0 {
		if err := watch.Follow(ctx, scopes...); err != nil {
			if ctx.Err() == nil {
				f.lost(err)
			}
			return
		}
		f.k.connected(epoch, scopes)
	} else {
		f.k.connected(epoch, nil)
	}
	defer f.k.disconnected(epoch)

	fctx, stop := context.WithCancel(ctx)
	var follower sync.WaitGroup
	follower.Add(1)
	go func() {
		defer follower.Done()
		f.follow(fctx, watch, epoch)
	}()
	defer follower.Wait()
	defer stop()
	for {
		t, err := watch.Next(ctx)
		if err != nil {
			f.k.disconnected(epoch)
			if ctx.Err() == nil {
				f.lost(err)
			}
			return
		}
		if t.Cause != "" {
			// Heard before, now with the span that recorded it (cause.go).
			f.k.caused(t.Scope, t.Generation, t.To, spanOf(t.Cause))
			continue
		}
		// A recovery heard starts the ramp of the scope's policy.
		f.k.learn(epoch, t.Scope, heard(t, f.k.policyOf(t.Scope).p.RampFor), instant.Now())
		f.tell(t)
	}
}

// follow does the table's work on connection epoch: following the scopes
// new to it, unfollowing those it forgot.
func (f *feed) follow(ctx context.Context, watch coordinator.Watch, epoch uint64) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.k.wake:
		}
		follow, unfollow := f.k.work(epoch)
		if len(unfollow) > 0 {
			if err := watch.Unfollow(ctx, unfollow...); err != nil {
				// The connection is broken: Next says so, and the next
				// connection follows only what the table holds.
				return
			}
		}
		if len(follow) > 0 {
			if err := watch.Follow(ctx, follow...); err != nil {
				return
			}
			f.k.followed(epoch, follow)
		}
	}
}
