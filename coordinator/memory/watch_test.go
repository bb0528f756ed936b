package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A reader that falls behind loses its feed rather than blocking the
// coordinator: after the buffered transitions it gets ErrFeedLost.
func TestWatchReaderThatFallsBehindLosesTheFeed(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(WithClock(func() time.Time { return now }))
	p := coordinator.Policy{Window: time.Second, Buckets: 10, ConsecutiveFailures: 1,
		OpenFor: time.Millisecond, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}
	ctx := context.Background()
	w, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Follow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	// Each round makes three transitions: closed->open->half-open->closed.
	published, gen := 0, uint64(0)
	for round := 0; published <= feedBuffer; round++ {
		if r, _ := c.Record(ctx, "s", p, []coordinator.Outcome{{Generation: gen, Failure: true}}); r.Transition == nil {
			t.Fatalf("round %d: no trip: %+v", round, r)
		}
		now = now.Add(time.Millisecond)
		claim := fmt.Sprint("probe-", round)
		d, _ := c.Admit(ctx, "s", p, claim)
		r, _ := c.Settle(ctx, "s", p, claim, coordinator.Outcome{Generation: d.Generation})
		if r.Transition == nil {
			t.Fatalf("round %d: probe did not close: %+v", round, r)
		}
		gen = r.Generation
		published += 3
	}
	for i := range feedBuffer {
		if _, err := w.Next(ctx); err != nil {
			t.Fatalf("Next %d of the buffered transitions: %v", i, err)
		}
	}
	if _, err := w.Next(ctx); !errors.Is(err, coordinator.ErrFeedLost) {
		t.Fatalf("Next after the buffer: %v, want ErrFeedLost", err)
	}
}
