package bench

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// TestTripResults: propagation counts from the sending of the tripping
// Record to the last replica's hearing, of that generation or a later
// one; detection sums the failing calls each replica made before its first
// rejection, against the window's failures at the trip.
func TestTripResults(t *testing.T) {
	const scope = "s"
	t0 := time.Unix(1000, 0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	replicas := make([]*replica, 3)
	for i := range replicas {
		replicas[i] = &replica{id: i, byScope: map[string]*scopeCounts{scope: {}}}
	}
	o := newObserver(len(replicas))
	o.tripped(scope, 2, us(0), "failures 20/20 >= 50%")
	o.learned(scope, 2, 0, us(100))
	o.learned(scope, 2, 1, us(300))
	// Replica 2 hears only of the next trip: it still knew the first by
	// then.
	o.tripped(scope, 4, us(5000), "probe failed")
	o.learned(scope, 4, 0, us(5050))
	o.learned(scope, 4, 1, us(5400))
	o.learned(scope, 4, 2, us(5200))
	// Sent after the measurement: left out.
	o.tripped(scope, 6, us(9000), "probe failed")
	for i, failed := range []int64{9, 8, 7} {
		c := replicas[i].byScope[scope]
		c.stopped, c.absorbed = true, failed
	}

	res := o.results(us(8000), replicas)
	want := []time.Duration{400 * time.Microsecond, 5200 * time.Microsecond}
	if res.trips != 2 || res.unheard != 0 || len(res.propagation) != 2 || res.propagation[0] != want[0] || res.propagation[1] != want[1] {
		t.Errorf("%d trips, %d unheard, propagation %v: want 2, 0, %v", res.trips, res.unheard, res.propagation, want)
	}
	if res.scopes != 1 || res.unstopped != 0 || res.absorbed != 24 || res.needed != 20 {
		t.Errorf("%d scopes stopped, %d not, absorbed %d, needed %d: want 1, 0, 24, 20", res.scopes, res.unstopped, res.absorbed, res.needed)
	}

	for reason, want := range map[string]int64{
		"failures 20/20 >= 50%":                                20,
		"consecutive failures 23 >= 20, leaving out 1 replica": 23,
		"failures 31/40 >= 50%, leaving out 2 replicas":        31,
		"consecutive failures 20 >= 20":                        20,
		"probe failed":                                         0,
	} {
		if got := windowFailures(reason); got != want {
			t.Errorf("windowFailures(%q) = %d; want %d", reason, got, want)
		}
	}

	replicas[1].byScope[scope].stopped = false
	res = o.results(us(9000), replicas)
	if res.trips != 3 || res.unheard != 1 || res.scopes != 0 || res.unstopped != 1 {
		t.Errorf("%d trips, %d unheard, %d scopes stopped, %d not: want 3, 1, 0, 1", res.trips, res.unheard, res.scopes, res.unstopped)
	}
}

// The simulator's Breakers hear policy changes on their feed, as a
// Breaker over the Redis coordinator does, instead of reading the fleet
// default twice a second as they would over a feed that cannot tell them.
func TestObservedWatchFollowsPolicies(t *testing.T) {
	// A Watch connects at its first Follow: this one never does.
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	w, err := (&observed{Coordinator: cbredis.New(rdb), r: &replica{}}).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := w.(coordinator.PolicyWatch); !ok {
		t.Errorf("the observed Watch, %T, is no coordinator.PolicyWatch", w)
	}
}
