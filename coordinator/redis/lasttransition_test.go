package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestLastTransitionIsTheFeedsLast: a scope that never moved has none; then
// it is the transition the feed carried last, field by field, whether a
// Breaker's cause was kept since or not; junk stored in its place, or a
// state key of another type, is corrupt state.
func TestLastTransitionIsTheFeedsLast(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	c := New(rdb)
	ctx := context.Background()
	const scope = "last/transition"
	if _, ok, err := c.LastTransition(ctx, scope); ok || err != nil {
		t.Fatalf("LastTransition of a scope with no state: %v, %v; want none", ok, err)
	}
	if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: watchPolicy, Claim: "born"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.LastTransition(ctx, scope); ok || err != nil {
		t.Fatalf("LastTransition of a scope born and never moved: %v, %v; want none", ok, err)
	}
	w := follow(t, ctx, c, scope)
	want := func(tr coordinator.Transition) {
		t.Helper()
		next(t, ctx, w, tr)
		got, ok, err := c.LastTransition(ctx, scope)
		if !ok || err != nil || got.Scope != tr.Scope || got.From != tr.From || got.To != tr.To || got.Generation != tr.Generation ||
			!got.At.Equal(tr.At) || got.Reason != tr.Reason || !got.OpenUntil.Equal(tr.OpenUntil) || got.Cause != "" {
			t.Errorf("LastTransition = %+v, %v, %v; want %+v", got, ok, err, tr)
		}
	}
	tripped := trip(t, c, scope)
	want(tripped)
	kept, err := c.KeepCause(ctx, coordinator.CauseRequest{Scope: scope, Generation: tripped.Generation, State: tripped.To,
		Cause: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if err != nil || !kept {
		t.Fatalf("KeepCause: %v, %v", kept, err)
	}
	tripped.Cause = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	next(t, ctx, w, tripped) // the feed's repeat, with the cause
	want(release(t, c, scope))

	key := scopeKeys(c.prefix, scope)[keyState]
	if err := rdb.HSet(ctx, key, "moved", "1 2 junk").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LastTransition(ctx, scope); !errors.Is(err, coordinator.ErrCorruptState) {
		t.Errorf("LastTransition of junk: %v; want ErrCorruptState", err)
	}
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, key, "no hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LastTransition(ctx, scope); !errors.Is(err, coordinator.ErrCorruptState) {
		t.Errorf("LastTransition of a string key: %v; want ErrCorruptState", err)
	}
}
