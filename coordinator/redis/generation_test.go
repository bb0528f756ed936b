package redis_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// stateKey returns the one state hash under prefix.
func stateKey(t *testing.T, rdb goredis.UniversalClient, prefix string) string {
	t.Helper()
	var found []string
	for _, k := range scopeKeys(t, rdb, prefix) {
		if strings.HasSuffix(k, ":state") {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("state hashes under %q: %q; want one", prefix, found)
	}
	return found[0]
}

// loseState deletes the one state hash under the default prefix, as an
// eviction would, and returns the generation label of the window it
// leaves behind.
func loseState(t *testing.T, rdb goredis.UniversalClient) uint64 {
	t.Helper()
	ctx := context.Background()
	state := stateKey(t, rdb, cbredis.DefaultPrefix)
	window := strings.TrimSuffix(state, ":state") + ":window"
	label, err := rdb.HGet(ctx, window, "generation").Result()
	if err != nil {
		t.Fatalf("the window %s has no generation label: %v", window, err)
	}
	if err := rdb.Del(ctx, state).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := strconv.ParseUint(label, 10, 64)
	if err != nil {
		t.Fatalf("window label %q: %v", label, err)
	}
	return g
}

// minted checks that gen lies above every generation handed out before,
// and adds it to them.
func minted(t *testing.T, what string, before *[]uint64, gen uint64) {
	t.Helper()
	for _, g := range *before {
		if gen <= g {
			t.Fatalf("%s: generation %d, not above %d handed out before (all: %v)", what, gen, g, *before)
		}
	}
	*before = append(*before, gen)
}

// A state hash lost on its own (eviction, a deleted key) restarts the
// breaker closed above the generation label of the window it leaves
// behind: never below it, even for a writer whose clock is behind the one
// that wrote (a failover to a server whose clock lags), and never at a
// generation handed out before. No old outcome is adopted.
func TestLostStateRestartsAboveTheWindowLabel(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	ahead, behind := coordinatortest.NewClock(), coordinatortest.NewClock()
	ahead.Advance(time.Minute)
	a := cbredis.New(rdb, cbredis.WithClock(ahead.Now))
	b := cbredis.New(rdb, cbredis.WithClock(behind.Now))
	p := tripPolicy()
	p.ConsecutiveFailures = 3
	var gens []uint64

	first := born(t, a, "s", p)
	minted(t, "birth", &gens, first)
	if _, err := a.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(first, 2)}); err != nil {
		t.Fatal(err)
	}
	if label := loseState(t, rdb); label != first {
		t.Fatalf("window label %d; want the generation of its buckets, %d", label, first)
	}
	res, err := b.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(first, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if want := implement.NextGeneration(first, behind.Now()); res.Generation != want || want != first+1 {
		t.Fatalf("Record after the loss: generation %d; want %d, just above the label %d (the writer's clock is a minute behind)", res.Generation, want, first)
	}
	minted(t, "restart after the loss", &gens, res.Generation)
	if res.Stale != 3 || res.State != coordinator.StateClosed || res.Transition != nil {
		t.Fatalf("Record after the loss = %+v; want closed, every old outcome stale, no transition", res)
	}
	s, err := b.Snapshot(ctx, "s", p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Generation != res.Generation || s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Fatalf("Snapshot after the loss = %+v; want generation %d and nothing counted", s, res.Generation)
	}

	// An open breaker lost restarts closed, above its open generation.
	res, err = b.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(res.Generation, 3)})
	if err != nil || res.State != coordinator.StateOpen {
		t.Fatalf("tripping: %+v, %v", res, err)
	}
	minted(t, "trip", &gens, res.Generation)
	if label := loseState(t, rdb); label != res.Generation {
		t.Fatalf("window label %d; want the open generation %d", label, res.Generation)
	}
	d, err := b.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != coordinator.Allow || d.State != coordinator.StateClosed || d.Transition != nil || d.Generation != res.Generation+1 {
		t.Fatalf("Admit after losing the open state = %+v; want Allow, closed, in generation %d", d, res.Generation+1)
	}
	minted(t, "restart after losing the open state", &gens, d.Generation)
}

// A scope forgotten after an idle window is born again above its old
// generation: by the expired state's generation while Redis still holds
// it, and at now × 1000 once Redis has deleted every key, which lies above
// every generation minted before.
func TestForgottenScopeIsBornAboveItsOldGeneration(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	clock := coordinatortest.NewClock()
	c := cbredis.New(rdb, cbredis.WithClock(clock.Now))
	p := tripPolicy()
	note := coordinator.Note{Reason: "test"}
	var gens []uint64

	// Four generations in one millisecond: the rule borrows from the next.
	minted(t, "birth", &gens, born(t, c, "s", p))
	for _, op := range []func(context.Context, coordinator.CommandRequest) (coordinator.Result, error){c.Isolate, c.Release, c.Disable} {
		res, err := op(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: note})
		if err != nil {
			t.Fatal(err)
		}
		minted(t, "operator", &gens, res.Generation)
	}
	res, err := c.Enable(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: note})
	if err != nil || res.Generation != gens[len(gens)-1] {
		t.Fatalf("Enable = %+v, %v; want generation %d kept", res, err, gens[len(gens)-1])
	}

	// Expired, still in Redis: the expired state is the floor.
	clock.Advance(p.Window)
	if s, err := c.Snapshot(ctx, "s", p); err != nil || !reflect.DeepEqual(s, coordinator.Snapshot{Scope: "s"}) {
		t.Fatalf("Snapshot of the forgotten scope = %+v, %v; want it not born", s, err)
	}
	reborn := born(t, c, "s", p)
	if want := implement.NextGeneration(gens[len(gens)-1], clock.Now()); reborn != want {
		t.Fatalf("born again in generation %d; want %d", reborn, want)
	}
	minted(t, "born again", &gens, reborn)

	// Every key gone, as Redis expires them: born at now × 1000.
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		rdb.Del(ctx, k)
	}
	clock.Advance(time.Millisecond)
	reborn = born(t, c, "s", p)
	if want := uint64(clock.Now().UnixMilli()) * 1000; reborn != want {
		t.Fatalf("born with no key left in generation %d; want now × 1000 = %d", reborn, want)
	}
	minted(t, "born with no key left", &gens, reborn)
}

// Redis itself forgets an idle closed scope: its keys expire a moment
// after its window, and the scope is then born above its old generation,
// so an outcome of the old one stays stale.
func TestIdleClosedScopeExpiresAndIsBornAgain(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb) // real time: this is about Redis expiring keys
	p := tripPolicy()
	p.Window, p.Buckets = 200*time.Millisecond, 4
	old := born(t, c, "s", p)
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: old}}, BatchID: "b1"}); err != nil {
		t.Fatal(err)
	}
	if n := len(scopeKeys(t, rdb, cbredis.DefaultPrefix)); n != 2 {
		t.Fatalf("Record wrote %d keys: %q; want state and window", n, scopeKeys(t, rdb, cbredis.DefaultPrefix))
	}
	deadline := time.Now().Add(p.Window + 5*time.Second)
	for len(scopeKeys(t, rdb, cbredis.DefaultPrefix)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys left after the window and margin: %v", scopeKeys(t, rdb, cbredis.DefaultPrefix))
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := time.Now()
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(old, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Generation <= old || res.Generation < uint64(before.UnixMilli())*1000 || res.Stale != 3 {
		t.Fatalf("Record of old outcomes after every key expired = %+v; want all stale, born above %d at now × 1000 (now %d ms)", res, old, before.UnixMilli())
	}
}

// TestGenerationAtTheTopIsRefusedNotStuck: a state hash whose generation
// is the top of the range a double holds (planted, or from a clock far
// ahead) cannot mint the next one: the operation that would fails with
// ErrCorruptState naming the field, where the generation used to stick.
func TestGenerationAtTheTopIsRefusedNotStuck(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	p.ConsecutiveFailures, p.Outliers = 1, 0
	if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "top", Policy: p, Claim: "a"}); err != nil {
		t.Fatal(err)
	}
	top := uint64(implement.MaxGeneration)
	state := stateKey(t, rdb, cbredis.DefaultPrefix)
	window := strings.TrimSuffix(state, ":state") + ":window"
	if err := rdb.HSet(ctx, state, "generation", strconv.FormatUint(top, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, window, "generation", strconv.FormatUint(top, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Record(ctx, coordinator.RecordRequest{Scope: "top", Policy: p, Outcomes: []coordinator.Outcome{{Generation: top, Failure: true}}})
	if !errors.Is(err, coordinator.ErrCorruptState) || !strings.Contains(err.Error(), "generation") {
		t.Errorf("a trip from generation %d: %v; want ErrCorruptState naming the generation", top, err)
	}
}
