package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// observed is a replica's Redis coordinator, watched from outside the
// library: it counts the replica's coordinator calls and the outcomes they
// delivered, notes every trip they make, and when the replica learns that
// a scope is open, from any answer (Admit, Record, Settle) or from its
// transition feed. The Breaker learns what an answer says as soon as the
// call returns, and what the feed says as soon as Next returns, in the
// same goroutine; so these times are when the replica's cache knows, to
// within a few microseconds.
type observed struct {
	*cbredis.Coordinator
	r *replica
}

func (c *observed) Admit(ctx context.Context, q coordinator.AdmitRequest) (coordinator.Decision, error) {
	start := time.Now()
	d, err := c.Coordinator.Admit(ctx, q)
	c.r.coordinatorCall(&c.r.admits, start, err)
	if err == nil && d.State == coordinator.StateOpen {
		c.r.learn(q.Scope, d.Generation, time.Now())
	}
	return d, err
}

func (c *observed) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	start := time.Now()
	res, err := c.Coordinator.Record(ctx, q)
	c.r.coordinatorCall(&c.r.records, start, err)
	if err == nil {
		c.r.delivered.Add(int64(len(q.Outcomes)))
	}
	c.result(q.Scope, start, res, err)
	return res, err
}

func (c *observed) Settle(ctx context.Context, q coordinator.SettleRequest) (coordinator.Result, error) {
	start := time.Now()
	res, err := c.Coordinator.Settle(ctx, q)
	c.r.coordinatorCall(&c.r.settles, start, err)
	if err == nil {
		c.r.delivered.Add(1)
	}
	c.result(q.Scope, start, res, err)
	return res, err
}

// result notes a trip that a Record or Settle sent at start made, and what
// its answer taught the replica.
func (c *observed) result(scope string, start time.Time, res coordinator.Result, err error) {
	if err != nil {
		return
	}
	now := time.Now()
	if t := res.Transition; t != nil && t.To == coordinator.StateOpen {
		c.r.obs.tripped(scope, t.Generation, start, t.Reason)
	}
	if res.State == coordinator.StateOpen {
		c.r.learn(scope, res.Generation, now)
	}
}

func (c *observed) Watch(ctx context.Context) (coordinator.Watch, error) {
	w, err := c.Coordinator.Watch(ctx)
	if err != nil {
		return nil, err
	}
	ow := &observedWatch{Watch: w, r: c.r}
	if pw, ok := w.(coordinator.PolicyWatch); ok {
		// Without it the Breaker would read the fleet default twice a
		// second, as it does over a feed that tells no policy changes.
		return &observedPolicyWatch{ow, pw}, nil
	}
	return ow, nil
}

type observedWatch struct {
	coordinator.Watch
	r *replica
}

// observedPolicyWatch is an observedWatch of a Watch that follows
// policy changes too.
type observedPolicyWatch struct {
	*observedWatch
	coordinator.PolicyWatch
}

func (w *observedWatch) Next(ctx context.Context) (coordinator.Transition, error) {
	t, err := w.Watch.Next(ctx)
	switch {
	case err == nil && t.To == coordinator.StateOpen:
		w.r.learn(t.Scope, t.Generation, time.Now())
	case errors.Is(err, coordinator.ErrFeedLost):
		w.r.feedsLost.Add(1)
	}
	return t, err
}

// observer gathers, fleet-wide, the trips the replicas made and when each
// replica learned of each open generation.
type observer struct {
	replicas int

	mu    sync.Mutex
	trips []madeTrip
	// heard is when each replica first learned that a scope was open in
	// a generation: by scope and generation, by replica.
	heard map[tripKey][]time.Time
}

type tripKey struct {
	scope      string
	generation uint64
}

// madeTrip is a transition to open, and when the Record or Settle that
// made it was sent: the trip happened in Redis between then and its
// answer, and the feed may carry it to the others before the answer is
// back.
type madeTrip struct {
	tripKey
	at     time.Time
	reason string
}

func newObserver(replicas int) *observer {
	return &observer{replicas: replicas, heard: make(map[tripKey][]time.Time)}
}

func (o *observer) tripped(scope string, generation uint64, at time.Time, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trips = append(o.trips, madeTrip{tripKey{scope, generation}, at, reason})
}

func (o *observer) learned(scope string, generation uint64, replica int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := tripKey{scope, generation}
	hs := o.heard[k]
	if hs == nil {
		hs = make([]time.Time, o.replicas)
		o.heard[k] = hs
	}
	if hs[replica].IsZero() || at.Before(hs[replica]) {
		hs[replica] = at
	}
}

// tripResults is what the trips of a run showed.
type tripResults struct {
	trips int
	// unheard counts the trips that some replica had not learned of (in
	// that generation or a later one) by the end.
	unheard int
	// propagation is, per trip heard by all, the time from the sending of
	// the Record or Settle that made it to the moment the last replica
	// knew; sorted.
	propagation []time.Duration
	// Detection, over each scope's first trip: the scopes every replica
	// stopped calling (rejected a call), the failing calls they made
	// before that (absorbed), and the failures that tripped it (needed,
	// from the transition's reason, windowFailures; 0 when the reason
	// does not say). unstopped counts the tripped scopes some replica
	// never rejected, left out of the sums.
	scopes, unstopped int
	absorbed, needed  int64
}

// results sums up the trips sent before until, and the failing calls the
// replicas absorbed before they rejected. The replicas must have stopped
// calling.
func (o *observer) results(until time.Time, replicas []*replica) tripResults {
	o.mu.Lock()
	defer o.mu.Unlock()
	var res tripResults
	first := make(map[string]madeTrip)
	for _, t := range o.trips {
		if t.at.After(until) {
			continue
		}
		res.trips++
		if f, ok := first[t.scope]; !ok || t.generation < f.generation {
			first[t.scope] = t
		}
		last, ok := o.lastHeard(t.tripKey)
		if !ok {
			res.unheard++
			continue
		}
		res.propagation = append(res.propagation, max(0, last.Sub(t.at)))
	}
	slices.Sort(res.propagation)
	for _, t := range first {
		absorbed, ok := absorbedBy(replicas, t.scope)
		if !ok {
			res.unstopped++
			continue
		}
		res.scopes++
		res.absorbed += absorbed
		res.needed += windowFailures(t.reason)
	}
	return res
}

// windowFailures is the failures that tripped a rule, from a trip's
// reason: "failures 20/20 >= 50%" or "consecutive failures 20 >= 20"
// (either maybe followed by ", leaving out ..."); 0 for another reason.
func windowFailures(reason string) int64 {
	var failures, of int64
	if n, _ := fmt.Sscanf(reason, "failures %d/%d", &failures, &of); n == 2 {
		return failures
	}
	if n, _ := fmt.Sscanf(reason, "consecutive failures %d >= %d", &failures, &of); n == 2 {
		return failures
	}
	return 0
}

// lastHeard returns when the last replica learned that the trip's scope
// was open in its generation or a later one; false if some replica never
// did. o.mu is held.
func (o *observer) lastHeard(k tripKey) (time.Time, bool) {
	known := make([]time.Time, o.replicas)
	for hk, hs := range o.heard {
		if hk.scope != k.scope || hk.generation < k.generation {
			continue
		}
		for i, at := range hs {
			if !at.IsZero() && (known[i].IsZero() || at.Before(known[i])) {
				known[i] = at
			}
		}
	}
	var last time.Time
	for _, at := range known {
		if at.IsZero() {
			return time.Time{}, false
		}
		if at.After(last) {
			last = at
		}
	}
	return last, true
}

// absorbedBy returns the failing calls of scope that the replicas made
// before each first rejected one; false if some replica never rejected
// it.
func absorbedBy(replicas []*replica, scope string) (int64, bool) {
	var absorbed int64
	for _, r := range replicas {
		c := r.byScope[scope]
		if !c.stopped {
			return 0, false
		}
		absorbed += c.absorbed
	}
	return absorbed, true
}
