package main

import (
	"context"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// hub keeps the dashboard's table of every scope from what cbctl list and
// cbctl watch read: a listing, again every refresh interval while a page
// is open (the window counts), and the transition feed, which updates a
// scope's row as soon as it moves. Every change goes to the open pages'
// event streams.
type hub struct {
	c       *cbredis.Coordinator
	p       coordinator.Policy
	refresh time.Duration
	timeout time.Duration
	kick    chan struct{} // a page wants a listing now

	mu       sync.Mutex
	rows     map[string]row
	version  uint64        // counts the table's changes
	listedAt time.Time     // when the last listing started; zero before the first
	listErr  string        // why the last listing failed; "" when it did not
	feedErr  string        // why the feed is not live; "" while it is
	listed   chan struct{} // closed, and replaced, after every listing
	subs     map[*subscriber]bool
}

// row is what the dashboard knows of one scope, and when it was read: a
// listing that started before a transition was heard does not undo it.
type row struct {
	s       coordinator.Snapshot
	learned time.Time
}

func newHub(c *cbredis.Coordinator, p coordinator.Policy, refresh, timeout time.Duration) *hub {
	return &hub{c: c, p: p, refresh: refresh, timeout: timeout, kick: make(chan struct{}, 1),
		rows: map[string]row{}, listed: make(chan struct{}), subs: map[*subscriber]bool{},
		feedErr: "not connected yet"}
}

// run follows the fleet until ctx ends, opening the feed again a second
// after it is lost.
func (h *hub) run(ctx context.Context) {
	for {
		err := h.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		h.setFeed("transition feed lost: " + err.Error() + "; connecting again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// follow is the life of one Watch: one goroutine reads its transitions,
// another lists the scopes and follows them, until the feed breaks or ctx
// ends.
func (h *hub) follow(ctx context.Context) error {
	w, err := h.c.Watch(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		w.Close()
		wg.Wait()
	}()
	lost := make(chan error, 1)
	wg.Go(func() {
		for {
			t, err := w.Next(ctx)
			if err != nil {
				lost <- err
				return
			}
			h.heard(ctx, t)
		}
	})
	wg.Go(func() { h.lister(ctx, w) })
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-lost:
		return err
	}
}

// lister lists the scopes and follows those it has not followed yet, then
// again each refresh interval while a page is open, and never more often
// than a listing takes.
func (h *hub) lister(ctx context.Context, w coordinator.Watch) {
	followed := map[string]bool{}
	for {
		start := time.Now()
		lctx, cancel := context.WithTimeout(ctx, h.timeout)
		list, err := h.c.List(lctx, h.p)
		if err == nil {
			h.merge(list, start)
			seen := make(map[string]bool, len(list))
			var add []string
			for _, s := range list {
				seen[s.Scope] = true
				if !followed[s.Scope] {
					add = append(add, s.Scope)
				}
			}
			var gone []string
			for scope := range followed {
				if !seen[scope] {
					gone = append(gone, scope)
					delete(followed, scope)
				}
			}
			// A scope forgotten (not born) is followed again once listed again.
			if err = w.Unfollow(lctx, gone...); err == nil {
				err = w.Follow(lctx, add...)
			}
			if err == nil {
				for _, scope := range add {
					followed[scope] = true
				}
				h.setFeed("")
			}
		}
		cancel()
		h.listDone(err)
		if !h.due(ctx, max(h.refresh, time.Since(start))) {
			return
		}
	}
}

// due waits for the next listing: d has passed, and a page is open or
// asks for one. It returns false when ctx ends first.
func (h *hub) due(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	h.mu.Lock()
	watched := len(h.subs) > 0
	h.mu.Unlock()
	if watched {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-h.kick:
		return true
	}
}

// current waits for the first listing, until ctx ends. With no page open
// the window counts are not listed again by themselves: a request asks
// for a listing, and is answered at once with what the table holds (its
// states follow the feed all the same; listed_at says how old its counts
// are).
func (h *hub) current(ctx context.Context) {
	h.mu.Lock()
	first := h.listedAt.IsZero()
	stale := len(h.subs) == 0 && time.Since(h.listedAt) > h.refresh
	listed := h.listed
	h.mu.Unlock()
	if stale {
		h.poke()
	}
	if !first {
		return
	}
	select {
	case <-listed:
	case <-ctx.Done():
	}
}

func (h *hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// heard takes a transition from the feed: it reads the scope again, for
// the note and the last trip the transition does not carry, and tells the
// pages.
func (h *hub) heard(ctx context.Context, t coordinator.Transition) {
	if t.Cause != "" {
		// Heard before, now with the span that recorded it: no news for
		// the pages (the Breakers' feed skips it the same way).
		return
	}
	learned := time.Now()
	sctx, cancel := context.WithTimeout(ctx, h.timeout)
	s, err := h.c.Snapshot(sctx, t.Scope, h.p)
	cancel()
	if err != nil {
		// What the transition says, until the next listing.
		s = h.applied(t)
	}
	r := h.learn(s, learned)
	h.broadcast("transition", transitionEventJSON{Transition: toTransitionJSON(t), Row: r})
}

// applied is the scope's row with t applied.
func (h *hub) applied(t coordinator.Transition) coordinator.Snapshot {
	h.mu.Lock()
	s := h.rows[t.Scope].s
	h.mu.Unlock()
	if t.Generation < s.Generation {
		return s
	}
	s.Scope, s.State, s.Generation, s.OpenUntil = t.Scope, t.To, t.Generation, t.OpenUntil
	return s
}

// learn puts what was read of one scope at learned into the table, unless
// the table knows a later generation, and returns the row it holds then
// (nil when the scope is not born).
func (h *hub) learn(s coordinator.Snapshot, learned time.Time) *rowJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.rows[s.Scope]
	switch {
	case ok && s.Generation < r.s.Generation:
	case s.Generation == 0:
		delete(h.rows, s.Scope)
		h.version++
		return nil
	default:
		r = row{s: s, learned: learned}
		h.rows[s.Scope] = r
		h.version++
	}
	out := toRowJSON(r.s)
	return &out
}

// merge puts a listing that started at start into the table: a scope's row
// is replaced unless it is of a later generation, or of the same one but
// learned after the listing started; a scope the listing did not find is
// gone, unless it was learned since.
func (h *hub) merge(list []coordinator.Snapshot, start time.Time) {
	h.mu.Lock()
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		seen[s.Scope] = true
		r, ok := h.rows[s.Scope]
		// A corrupt scope, which has no generation to read, shows as such.
		if !ok || s.Corrupt != nil || s.Generation > r.s.Generation || (s.Generation == r.s.Generation && !r.learned.After(start)) {
			h.rows[s.Scope] = row{s: s, learned: start}
		}
	}
	for scope, r := range h.rows {
		if !seen[scope] && !r.learned.After(start) {
			delete(h.rows, scope)
		}
	}
	h.version++
	h.listedAt = start
	ev := refreshEventJSON{Version: h.version, Scopes: len(h.rows), ListedAt: jsonTime(start)}
	h.mu.Unlock()
	h.broadcast("refresh", ev)
}

// listDone ends a listing: requests waiting for it go on, and the pages
// hear whether it failed.
func (h *hub) listDone(err error) {
	msg := ""
	if err != nil {
		msg = "listing failed: " + err.Error()
	}
	h.mu.Lock()
	close(h.listed)
	h.listed = make(chan struct{})
	changed := msg != h.listErr
	h.listErr = msg
	h.mu.Unlock()
	if changed {
		h.broadcast("status", h.status())
	}
}

func (h *hub) setFeed(msg string) {
	h.mu.Lock()
	changed := msg != h.feedErr
	h.feedErr = msg
	h.mu.Unlock()
	if changed {
		h.broadcast("status", h.status())
	}
}

// statusJSON is whether the dashboard is live: the feed is followed and
// the last listing worked.
type statusJSON struct {
	Live      bool   `json:"live"`
	FeedError string `json:"feed_error,omitempty"`
	ListError string `json:"list_error,omitempty"`
	Version   uint64 `json:"version"`
}

func (h *hub) status() statusJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	return statusJSON{Live: h.feedErr == "" && h.listErr == "", FeedError: h.feedErr, ListError: h.listErr, Version: h.version}
}

// rowJSON is one scope on the dashboard: its snapshot, and the failure
// ratio of its window.
type rowJSON struct {
	snapshotJSON
	FailureRatio float64 `json:"failure_ratio"` // failures / calls in the window; 0 with no calls
}

func toRowJSON(s coordinator.Snapshot) rowJSON {
	r := rowJSON{snapshotJSON: toJSON(s)}
	if s.Calls > 0 {
		r.FailureRatio = float64(s.Failures) / float64(s.Calls)
	}
	return r
}

// transitionEventJSON is a transition heard on the feed, with the row of
// its scope afterwards (null when the scope is not born).
type transitionEventJSON struct {
	Transition transitionJSON `json:"transition"`
	Row        *rowJSON       `json:"row"`
}

// refreshEventJSON says a listing refreshed the table: the page reads its
// page of it again.
type refreshEventJSON struct {
	Version  uint64 `json:"version"`
	Scopes   int    `json:"scopes"`
	ListedAt string `json:"listed_at"`
}
