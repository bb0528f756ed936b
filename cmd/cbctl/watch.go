package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// Bounds of the wait between attempts to reconnect a lost feed: short for
// a blip (a failover, a paused server), long enough not to hammer a Redis
// that is down.
const (
	reconnectFirst = 100 * time.Millisecond
	reconnectMax   = 5 * time.Second
)

func cmdWatch(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	rescan := fs.Duration("rescan", 10*time.Second, "how often to read the scopes again: new scopes (without SCOPE), outlier spells (0: never)")
	ctx, _, c, p, pos, err := e.setup(ctx, args, func([]string) error { return nil })
	if err != nil {
		return err
	}
	if *rescan < 0 {
		return usageErr("--rescan %v: want 0 or more", *rescan)
	}
	slices.Sort(pos)
	f := &watcher{e: e, c: c, p: p, pos: slices.Compact(pos), rescan: *rescan, st: newStory(e, c, p)}
	// The first connection fails the command: a wrong address or password
	// is not a blip to wait out.
	w, r, err := f.open(ctx)
	if err != nil {
		return err
	}
	f.st.begin(r)
	fmt.Fprintf(e.stderr, "cbctl: watch: following %d scopes\n", len(r.scopes))
	for {
		err := f.print(ctx, w)
		w.Close()
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: a normal end
		case !errors.Is(err, coordinator.ErrFeedLost):
			return err
		}
		fmt.Fprintf(e.stderr, "cbctl: watch: %s; reconnecting (transitions until then are missed)\n", escapeLines(err.Error()))
		if w, r, err = f.reopen(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fmt.Fprintf(e.stderr, "cbctl: watch: reconnected, following %d scopes\n", len(r.scopes))
		if err := f.st.resume(ctx, r); err != nil {
			w.Close()
			return err
		}
	}
}

// watcher follows the scopes watch was given, or those it lists.
type watcher struct {
	e      *env
	c      *cbredis.Coordinator
	p      coordinator.Policy
	pos    []string
	rescan time.Duration
	st     *story // used by the goroutine that prints only
}

// reading is what one read of the scopes found, and when it started by
// cbctl's clock: every listed scope, or each one given.
type reading struct {
	at     time.Time
	scopes []coordinator.Snapshot
}

// set is the scopes of r.
func (r reading) set() map[string]bool {
	m := make(map[string]bool, len(r.scopes))
	for _, s := range r.scopes {
		m[s.Scope] = true
	}
	return m
}

// open opens a Watch, reads the scopes and follows them.
func (f *watcher) open(ctx context.Context) (coordinator.Watch, reading, error) {
	w, err := f.c.Watch(ctx)
	if err != nil {
		return nil, reading{}, err
	}
	r, err := f.read(ctx)
	if err == nil {
		err = f.follow(ctx, w, r)
	}
	if err != nil {
		w.Close()
		return nil, reading{}, err
	}
	return w, r, nil
}

// reopen opens a Watch until it works, waiting longer after each
// transient error (a lost connection, a server loading or failing over),
// up to reconnectMax; any other error, such as a refusal of the
// credentials or the ACL, ends it.
func (f *watcher) reopen(ctx context.Context) (coordinator.Watch, reading, error) {
	wait := reconnectFirst
	for {
		select {
		case <-ctx.Done():
			return nil, reading{}, ctx.Err()
		case <-time.After(wait):
		}
		w, r, err := f.open(ctx)
		if err == nil || !cbredis.Transient(err) || ctx.Err() != nil {
			return w, r, err
		}
		wait = min(2*wait, reconnectMax)
	}
}

// read lists the scopes, or reads those given. A given scope whose state
// cannot be read is one to follow all the same, as List keeps it.
func (f *watcher) read(ctx context.Context) (reading, error) {
	ctx, cancel := context.WithTimeout(ctx, f.e.timeout)
	defer cancel()
	r := reading{at: time.Now()}
	if len(f.pos) == 0 {
		var err error
		r.scopes, err = f.c.List(ctx, f.p)
		return r, err
	}
	for _, scope := range f.pos {
		s, err := f.c.Snapshot(ctx, scope, f.p)
		switch {
		case errors.Is(err, coordinator.ErrCorruptState):
			s = coordinator.Snapshot{Scope: scope, Corrupt: err}
		case err != nil:
			return reading{}, err
		}
		r.scopes = append(r.scopes, s)
	}
	return r, nil
}

// follow follows the scopes of r, those not followed yet.
func (f *watcher) follow(ctx context.Context, w coordinator.Watch, r reading) error {
	scopes := make([]string, len(r.scopes))
	for i, s := range r.scopes {
		scopes[i] = s.Scope
	}
	ctx, cancel := context.WithTimeout(ctx, f.e.timeout)
	defer cancel()
	return w.Follow(ctx, scopes...)
}

// print tells w's transitions, and what a reading every rescan finds,
// until the feed ends or the output fails. One goroutine reads the feed
// and another reads the scopes; this one alone prints, in the order it
// hears.
func (f *watcher) print(ctx context.Context, w coordinator.Watch) error {
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	heard := make(chan coordinator.Transition)
	lost := make(chan error, 1)
	wg.Go(func() {
		for {
			t, err := w.Next(ctx)
			if err != nil {
				lost <- err
				return
			}
			select {
			case heard <- t:
			case <-ctx.Done():
				return
			}
		}
	})
	readings := make(chan reading)
	if f.rescan > 0 {
		wg.Go(func() { f.rescans(ctx, w, readings) })
	}
	for {
		var err error
		select {
		case t := <-heard:
			err = f.st.heard(ctx, t)
		case r := <-readings:
			err = f.st.found(ctx, r)
		case err = <-lost:
		}
		if err != nil {
			return err
		}
	}
}

// rescans reads the scopes every rescan, and follows those it finds new
// before it hands the reading over, so that what they do from then on is
// on the feed. A failed reading is tried again at the next tick; a broken
// feed ends Next.
func (f *watcher) rescans(ctx context.Context, w coordinator.Watch, out chan<- reading) {
	t := time.NewTicker(f.rescan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := f.read(ctx)
		if err != nil || f.follow(ctx, w, r) != nil {
			continue
		}
		select {
		case out <- r:
		case <-ctx.Done():
			return
		}
	}
}
