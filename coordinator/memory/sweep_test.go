package memory_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A scope that minted more than a thousand generations in its last
// millisecond has borrowed from the next ones. Forgotten a millisecond
// later (a window of 1ms), it must still be born again above them, even
// after the coordinator swept its forgotten scopes.
func TestForgottenScopeIsBornAboveBorrowedGenerations(t *testing.T) {
	c, clk := onFakeClock()
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	p.Window, p.Buckets = time.Millisecond, 1
	note := coordinator.Note{Reason: "flapping"}
	var last coordinator.Result
	var err error
	for range 600 {
		if _, err = c.Isolate(ctx, "flapping", p, note); err == nil {
			last, err = c.Release(ctx, "flapping", p, note)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if floor := coordinator.NextGeneration(0, clk.Now().Add(time.Millisecond)); last.Generation < floor {
		t.Fatalf("1200 generations minted in one millisecond end at %d; want them to borrow past %d", last.Generation, floor)
	}
	clk.Advance(time.Millisecond)
	// Operations on other scopes give the coordinator the occasion to sweep.
	for _, scope := range []string{"a", "b", "c"} {
		if _, err := c.Admit(ctx, scope, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := c.Snapshot(ctx, "flapping", p); !reflect.DeepEqual(s, coordinator.Snapshot{Scope: "flapping"}) {
		t.Fatalf("snapshot a window after the last release: %+v; want a forgotten scope", s)
	}
	d, err := c.Admit(ctx, "flapping", p, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation <= last.Generation {
		t.Errorf("born again in generation %d; want above %d, the last one it had", d.Generation, last.Generation)
	}
}
