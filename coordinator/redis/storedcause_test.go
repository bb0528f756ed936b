package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestStoredCausesAreCheckedBeforeTheyLeave: whatever the state hash
// holds as a cause (a megabyte of junk, junk, a traceparent of all
// zeros), an answer carries a valid traceparent or nothing, and no answer
// grows with it.
func TestStoredCausesAreCheckedBeforeTheyLeave(t *testing.T) {
	clock := coordinatortest.NewClock()
	c := New(redistest.Start(t).Client(t), WithClock(clock.Now))
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	p.ConsecutiveFailures, p.Outliers, p.Probes = 1, 0, 1
	const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for i, stored := range []string{strings.Repeat("x", 1<<20), "junk", "00-00000000000000000000000000000000-0000000000000000-00", valid} {
		scope := "stored-cause/" + string(rune('a'+i))
		d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "a"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true}}})
		if err != nil || res.State != coordinator.StateOpen {
			t.Fatalf("the trip: %+v, %v", res, err)
		}
		key := scopeKeys(c.prefix, scope)[keyState]
		if err := c.client.HSet(ctx, key, "cause", stored).Err(); err != nil {
			t.Fatal(err)
		}
		var got []string
		open, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "open"})
		if err != nil || open.Verdict != coordinator.Reject {
			t.Fatalf("while open: %+v, %v", open, err)
		}
		got = append(got, open.Cause)
		// The move to half-open drops the cause of open; half-open's own
		// comes with its rejections.
		clock.Advance(p.OpenFor)
		if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "probe"}); err != nil {
			t.Fatal(err)
		}
		if err := c.client.HSet(ctx, key, "cause", stored).Err(); err != nil {
			t.Fatal(err)
		}
		half, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "rejected"})
		if err != nil || half.Verdict != coordinator.Reject {
			t.Fatalf("at the probe limit: %+v, %v", half, err)
		}
		got = append(got, half.Cause)
		want := ""
		if stored == valid {
			want = valid
		}
		for _, cause := range got {
			if cause != want {
				t.Errorf("stored cause %.20q (%d bytes): answered %.20q (%d bytes); want %q", stored, len(stored), cause, len(cause), want)
			}
		}
	}
}
