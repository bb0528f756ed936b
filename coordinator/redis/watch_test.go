package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

var watchPolicy = coordinator.Policy{
	Window: 10 * time.Second, Buckets: 10, ConsecutiveFailures: 1,
	OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1,
}

// A replica following scopes on every node of a cluster hears of a trip
// that another replica, with its own client, makes on any of them.
func TestWatchFollowsScopesOnEveryClusterNode(t *testing.T) {
	cluster := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watcher := New(cluster.Client(t))
	tripper := New(cluster.Client(t))

	w, err := watcher.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	scopes := clusterScopes(t, cluster)
	if err := w.Follow(ctx, scopes...); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if n := len(w.(*watch).subs); n != len(cluster.Nodes) {
		t.Errorf("%d sharded subscriptions for scopes on %d nodes", n, len(cluster.Nodes))
	}
	for _, scope := range scopes {
		res, err := tripper.Record(ctx, scope, watchPolicy, []coordinator.Outcome{{Failure: true}})
		if err != nil || res.Transition == nil {
			t.Fatalf("tripping %q: %+v, %v", scope, res, err)
		}
		got, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("Next after tripping %q: %v", scope, err)
		}
		want := *res.Transition
		if got.Scope != scope || got.From != want.From || got.To != want.To ||
			got.Generation != want.Generation || !got.At.Equal(want.At) || got.Reason != want.Reason {
			t.Errorf("transition of %q: got %+v, want %+v", scope, got, want)
		}
	}
}

// When the connection carrying the feed breaks, Next says the feed is lost
// rather than going quiet: what was published meanwhile is gone.
func TestWatchBrokenConnectionLosesTheFeed(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(srv.Client(t))
	w, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Follow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(ctx); !errors.Is(err, coordinator.ErrFeedLost) {
		t.Fatalf("Next after the connection was killed: %v, want ErrFeedLost", err)
	}
	if err := w.Follow(ctx, "t"); err == nil {
		t.Error("Follow on a lost Watch succeeded")
	}
}

// Scopes are opaque on the feed too: braces, newlines and spaces in a
// scope reach the follower intact.
func TestWatchOpaqueScopes(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(srv.Client(t))
	w, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	scope := "a {b}\nc d|e \xff"
	if err := w.Follow(ctx, scope, "unrelated"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Record(ctx, scope, watchPolicy, []coordinator.Outcome{{Failure: true}}); err != nil {
		t.Fatal(err)
	}
	got, err := w.Next(ctx)
	if err != nil || got.Scope != scope || got.To != coordinator.StateOpen || got.Reason != "consecutive failures 1 >= 1" {
		t.Fatalf("Next = %+v, %v; want %q opened", got, err, scope)
	}
}
