package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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
	rdb, clock, c, p, gen := windowScope(t)
	for range 4 { // 4 buckets, 2 outcomes each: 4 failures of 8
		if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen, Failure: true}, {Generation: gen}}}); err != nil {
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
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}})
	if err != nil || res.Transition != nil {
		t.Fatalf("9th outcome, a success: %+v, %v; want no trip (4 failures of 9)", res, err)
	}
	res, err = c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen, Failure: true}}})
	if err != nil || res.Transition == nil || res.Transition.Reason != "failures 5/10 >= 50%" {
		t.Fatalf("10th outcome, a failure: %+v, %v; want the trip at 5 of 10, every bucket counted", res, err)
	}
}

// TestThrottledKeptBesideTheBuckets: throttled requests live in fields of
// their own (throttled:<index>, and their total), so that every bucket
// keeps the form "calls failures slow" that replicas of an earlier release
// of layout v2 read; the fields go when their requests leave the window.
func TestThrottledKeptBesideTheBuckets(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	clock := coordinatortest.NewClock()
	c := cbredis.New(rdb, cbredis.WithClock(clock.Now))
	p := coordinator.Policy{Window: 10 * time.Second, Buckets: 10, MinCalls: 10, FailureRatio: 0.75,
		OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1, Throttle: 2}
	gen := born(t, c, "s", p)
	var window string
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		if strings.HasSuffix(k, ":window") {
			window = k
		}
	}
	throttledFields := func() (n int) {
		for f := range rdb.HGetAll(ctx, window).Val() {
			if strings.HasPrefix(f, "throttled") {
				n++
			}
		}
		return n
	}
	for range 3 {
		if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}, {Generation: gen, Throttled: true}}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	for f, v := range rdb.HGetAll(ctx, window).Val() {
		if f[0] >= '0' && f[0] <= '9' && strings.Count(v, " ") != 2 {
			t.Errorf("bucket %s = %q; want \"calls failures slow\"", f, v)
		}
	}
	if n := throttledFields(); n != 5 {
		t.Errorf("%d throttled fields; want 3 buckets, the total and its head", n)
	}
	clock.Advance(5 * time.Second)
	if res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}}); err != nil || res.Calls != 4 || res.Throttled != 3 {
		t.Fatalf("a call 8s on: %+v, %v; want 4 calls and 3 throttled", res, err)
	}
	clock.Advance(4 * time.Second) // the three first buckets leave the window
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}})
	if err != nil || res.Calls != 2 || res.Throttled != 0 {
		t.Fatalf("a call once the throttled requests have left: %+v, %v; want 2 calls, none throttled", res, err)
	}
	if n := throttledFields(); n != 0 {
		t.Errorf("%d throttled fields left; want none once no throttled request is in the window", n)
	}
}

// TestWindowWithoutLayoutIsTheRecordsOwn: a window that stores no layout
// (written by an earlier release of layout v2) is taken as written with
// the layout of the Record that finds it, which stores it: nothing is
// re-laid, and its buckets leave the window one by one.
func TestWindowWithoutLayoutIsTheRecordsOwn(t *testing.T) {
	ctx := context.Background()
	rdb, clock, c, p, gen := windowScope(t)
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen, Failure: true}, {Generation: gen}}}); err != nil {
		t.Fatal(err)
	}
	var window string
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		if strings.HasSuffix(k, ":window") {
			window = k
		}
	}
	if n := rdb.HDel(ctx, window, "width", "buckets").Val(); n != 2 {
		t.Fatalf("HDEL of the layout removed %d fields; want 2: the layout has changed", n)
	}
	clock.Advance(time.Second)
	if res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}}); err != nil || res.Calls != 3 || res.Failures != 1 {
		t.Fatalf("a Record a bucket later: %+v, %v; want 3 calls, 1 failure", res, err)
	}
	if got := rdb.HMGet(ctx, window, "width", "buckets").Val(); got[0] != "1000" || got[1] != "10" {
		t.Errorf("layout stored after the Record: %v; want [1000 10]", got)
	}
	clock.Advance(9 * time.Second) // the first bucket leaves, the second stays
	if s, err := c.Snapshot(ctx, "s", p); err != nil || s.Calls != 1 || s.Failures != 0 {
		t.Fatalf("Snapshot once the first bucket has left: %+v, %v; want the second bucket's call alone", s, err)
	}
}

// windowScope starts a redis-server and gives birth to scope "s" under a
// policy of ten 1s buckets, on a fake clock.
func windowScope(t *testing.T) (*goredis.Client, *coordinatortest.Clock, *cbredis.Coordinator, coordinator.Policy, uint64) {
	rdb := redistest.Start(t).Client(t)
	clock := coordinatortest.NewClock()
	c := cbredis.New(rdb, cbredis.WithClock(clock.Now))
	p := coordinator.Policy{Window: 10 * time.Second, Buckets: 10, MinCalls: 10, FailureRatio: 0.5,
		OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}
	return rdb, clock, c, p, born(t, c, "s", p)
}
