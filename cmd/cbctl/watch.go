package main

import (
	"context"
	"errors"
	"fmt"
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
	rescan := fs.Duration("rescan", 10*time.Second, "without SCOPE arguments: how often to list the scopes again, to follow new ones (0: never)")
	ctx, _, c, p, pos, err := e.setup(ctx, args, func([]string) error { return nil })
	if err != nil {
		return err
	}
	if *rescan < 0 {
		return usageErr("--rescan %v: want 0 or more", *rescan)
	}
	f := &watcher{e: e, c: c, p: p, pos: pos, rescan: *rescan, warned: map[string]bool{}}
	// The first connection fails the command: a wrong address or password
	// is not a blip to wait out.
	w, n, err := f.open(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "cbctl: watch: following %d scopes\n", n)
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
		if w, n, err = f.reopen(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fmt.Fprintf(e.stderr, "cbctl: watch: reconnected, following %d scopes\n", n)
	}
}

// watcher follows the scopes watch was given, or those it lists.
type watcher struct {
	e      *env
	c      *cbredis.Coordinator
	p      coordinator.Policy
	pos    []string
	rescan time.Duration
	warned map[string]bool // corrupt scopes said so: they are followed too (their channels work), and said once
}

// open opens a Watch and follows the scopes in it.
func (f *watcher) open(ctx context.Context) (coordinator.Watch, int, error) {
	w, err := f.c.Watch(ctx)
	if err != nil {
		return nil, 0, err
	}
	n, err := f.follow(ctx, w)
	if err != nil {
		w.Close()
		return nil, 0, err
	}
	return w, n, nil
}

// reopen opens a Watch until it works, waiting longer after each
// transient error (a lost connection, a server loading or failing over),
// up to reconnectMax; any other error, such as a refusal of the
// credentials or the ACL, ends it.
func (f *watcher) reopen(ctx context.Context) (coordinator.Watch, int, error) {
	wait := reconnectFirst
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(wait):
		}
		w, n, err := f.open(ctx)
		if err == nil || !cbredis.Transient(err) || ctx.Err() != nil {
			return w, n, err
		}
		wait = min(2*wait, reconnectMax)
	}
}

func (f *watcher) follow(ctx context.Context, w coordinator.Watch) (int, error) {
	scopes := f.pos
	if len(f.pos) == 0 {
		lctx, cancel := context.WithTimeout(ctx, f.e.timeout)
		defer cancel()
		list, err := f.c.List(lctx, f.p)
		if err != nil {
			return 0, err
		}
		for _, s := range list {
			scopes = append(scopes, s.Scope)
			if s.Corrupt != nil && !f.warned[s.Scope] {
				f.warned[s.Scope] = true
				fmt.Fprintf(f.e.stderr, "cbctl: watch: scope %s listed as corrupt: %s\n", quoteScope(s.Scope), escapeLines(s.Corrupt.Error()))
			}
		}
	}
	fctx, cancel := context.WithTimeout(ctx, f.e.timeout)
	defer cancel()
	return len(scopes), w.Follow(fctx, scopes...)
}

// print prints w's transitions, following new scopes every rescan, until
// the feed ends or the output fails.
func (f *watcher) print(ctx context.Context, w coordinator.Watch) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if len(f.pos) == 0 && f.rescan > 0 {
		done := make(chan struct{})
		defer func() {
			stop()
			<-done
		}()
		go func() {
			defer close(done)
			t := time.NewTicker(f.rescan)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					// A failed rescan is retried at the next tick; a broken
					// feed ends Next.
					f.follow(ctx, w)
				}
			}
		}()
	}
	for {
		t, err := w.Next(ctx)
		if err != nil {
			return err
		}
		if f.e.json {
			if err := writeJSONLine(f.e.stdout, toTransitionJSON(t)); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(f.e.stdout, transitionLine(t))
	}
}
