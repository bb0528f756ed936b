package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestWindowTotalsRebuiltFromBuckets: Record keeps running totals beside
// the buckets; a window holding buckets but no totals (written by an
// earlier release of the layout, or with the totals' fields lost) is
// summed once, and the rules see every live bucket.
func TestWindowTotalsRebuiltFromBuckets(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	clock := coordinatortest.NewClock()
	c := cbredis.New(rdb, cbredis.WithClock(clock.Now))
	p := coordinator.Policy{Window: 10 * time.Second, Buckets: 10, MinCalls: 10, FailureRatio: 0.5,
		OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}
	gen := born(t, c, "s", p)
	for range 4 { // 4 buckets, 2 outcomes each: 4 failures of 8
		if _, err := c.Record(ctx, "s", p, []coordinator.Outcome{{Generation: gen, Failure: true}, {Generation: gen}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	var window string
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		if strings.HasSuffix(k, ":window") {
			window = k
		}
	}
	if n := rdb.HDel(ctx, window, "head", "calls", "failures", "slow").Val(); n != 4 {
		t.Fatalf("HDEL of the totals removed %d fields; want 4: the layout has changed", n)
	}
	res, err := c.Record(ctx, "s", p, []coordinator.Outcome{{Generation: gen}})
	if err != nil || res.Transition != nil {
		t.Fatalf("9th outcome, a success: %+v, %v; want no trip (4 failures of 9)", res, err)
	}
	res, err = c.Record(ctx, "s", p, []coordinator.Outcome{{Generation: gen, Failure: true}})
	if err != nil || res.Transition == nil || res.Transition.Reason != "failures 5/10 >= 50%" {
		t.Fatalf("10th outcome, a failure: %+v, %v; want the trip at 5 of 10, every bucket counted", res, err)
	}
}
