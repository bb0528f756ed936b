package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestThrottleSmoke runs the adaptive-throttling simulation briefly, fleet
// wide and per replica: every second is there, accepted ≤ admitted ≤
// offered, the overload is throttled and the plot draws the three series.
func TestThrottleSmoke(t *testing.T) {
	requireRedis(t)
	p := coordinator.DefaultPolicy()
	p.Window, p.Buckets, p.FailureRatio, p.Throttle = time.Second, 10, 0.8, 2
	for _, perReplica := range []bool{false, true} {
		r, err := StartRedis()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		cfg := ThrottleConfig{Replicas: 4, Rate: 50, Duration: 4 * time.Second, OverloadAt: time.Second, RecoverAt: 3 * time.Second,
			Capacity: 0.4, Policy: p, PerReplica: perReplica}
		run, err := RunThrottle(context.Background(), r.Target(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Seconds) != 4 {
			t.Fatalf("%d seconds; want 4", len(run.Seconds))
		}
		for i, s := range run.Seconds {
			if s.Offered == 0 || s.Accepted > s.Admitted || s.Admitted > s.Offered {
				t.Errorf("per replica %v, second %d: %+v; want 0 < accepted ≤ admitted ≤ offered", perReplica, i, s)
			}
		}
		if s := run.Seconds[2]; s.Admitted == s.Offered {
			t.Errorf("per replica %v, the second second of the overload: %+v; want some calls throttled", perReplica, s)
		}
		var svg strings.Builder
		if err := WriteThrottleSVG(&svg, run, "smoke"); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(svg.String(), "<polyline"); n != 3 || !strings.HasSuffix(svg.String(), "</svg>\n") {
			t.Errorf("the plot has %d series; want offered, admitted and accepted in a whole SVG", n)
		}
	}
}

func TestLocalThrottleShare(t *testing.T) {
	p := coordinator.DefaultPolicy() // MinCalls 20
	p.Throttle = 2
	l := NewLocalThrottle(p)
	now := time.Now()
	for i := range 100 {
		l.add(now, func(b *localBucket) {
			b.calls++
			if i < 60 {
				b.failures++
			}
		})
	}
	if got, want := l.share(now), (100-2*40)/101.0; got != want {
		t.Errorf("share with 40 of 100 accepted = %v; want %v", got, want)
	}
	if got := l.share(now.Add(p.Window)); got != 0 {
		t.Errorf("share a window later = %v; want 0", got)
	}
}
