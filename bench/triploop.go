package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// tripLoop is one replica's calls through one kind of breaker, and what
// they met. Its counts are kept under mu, since calls made at a rate run
// each in a goroutine of its own.
type tripLoop struct {
	kind tripBreaker
	i    int
	bad  bool
	dep  tripDependency
	// restart, for a bad replica, is how often it restarts (0: never).
	restart time.Duration
	// deadline is each call's (0: none); server, with Stream, the
	// dependency's server (nil: calls go to a stub invoker).
	deadline time.Duration
	server   *tripServer

	mu              sync.Mutex
	calls, rejected int64
	healthyRejected int64
	sparedRejected  int64
	// The outage, and the relapse.
	outages [2]tripOutage
	// downServed holds when each call served during the outage was made:
	// which came after the fleet stopped is known once the run is over.
	downServed []time.Duration
	// After the recovery: its first call served (-1: none yet), its calls
	// and those rejected.
	served                            time.Duration
	recoveredCalls, recoveredRejected int64
	// For a bad replica: its failing calls before each start's first
	// rejection, summed; seen, whether any start rejected, and
	// badStopped its first rejected call, from when its first start
	// began (-1: none); starts.
	failures   int64
	seen       bool
	badStopped time.Duration
	began      time.Time
	starts     int64
}

// tripOutage is how one replica stopped in one outage. failedSince counts
// the failing, slow or hung calls served since it began; stopped is the
// first rejection since then (-1: none yet), from when it began, and
// absorbed the count at that moment; hung counts the hung calls let
// through, before and after.
type tripOutage struct {
	failedSince int64
	stopped     time.Duration
	absorbed    int64
	hung        int64
}

// tripStart is one start of a replica's breaker; a replica that restarts
// has several, one at a time.
type tripStart struct {
	tripClient
	// conn is the start's connection to the server, with Stream.
	conn     *grpc.ClientConn
	inFlight sync.WaitGroup
	// Under the loop's mu.
	failed   int64
	rejected bool
}

// newTripLoop makes replica i's loop of a run of cfg; server is nil
// unless cfg.Stream.
func newTripLoop(kind tripBreaker, i int, cfg TripConfig, dep tripDependency, server *tripServer) *tripLoop {
	l := &tripLoop{kind: kind, i: i, bad: i < cfg.Bad, dep: dep, deadline: cfg.Deadline, server: server, served: -1, badStopped: -1}
	if l.bad {
		l.restart = cfg.BadRestart
	}
	for k := range l.outages {
		l.outages[k].stopped = -1
	}
	return l
}

func (l *tripLoop) begin() (*tripStart, error) {
	id := fmt.Sprintf("replica-%02d", l.i)
	if l.restart > 0 {
		id = fmt.Sprintf("replica-%02d-start-%d", l.i, l.starts)
	}
	c, err := l.kind.start(id)
	if err != nil {
		return nil, fmt.Errorf("%s breaker of %s: %w", l.kind.name, id, err)
	}
	s := &tripStart{tripClient: c}
	if l.server != nil {
		if s.conn, err = l.server.dial(); err != nil {
			c.end()
			return nil, fmt.Errorf("%s: dial the dependency: %w", id, err)
		}
	}
	if l.starts == 0 {
		l.began = time.Now()
	}
	l.starts++
	return s, nil
}

// finish ends a start once its calls have returned, as a process that
// drains before it exits; a start that never rejected gave all its
// failures.
func (l *tripLoop) finish(s *tripStart) {
	s.inFlight.Wait()
	s.end()
	if s.conn != nil {
		s.conn.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bad && !s.rejected {
		l.failures += s.failed
	}
}

// run calls the scope at rate (0: a tight loop, pausing a millisecond
// after a rejection only) from offset on until ctx ends. down says how
// long the dependency has been down (negative: not yet).
func (l *tripLoop) run(ctx context.Context, rate float64, offset time.Duration, down func() time.Duration) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(offset):
	}
	s, err := l.begin()
	if err != nil {
		return err
	}
	defer func() {
		if s != nil {
			l.finish(s)
		}
	}()
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
	}
	started := time.Now()
	for ctx.Err() == nil {
		if l.restart > 0 && time.Since(started) >= l.restart {
			l.finish(s)
			if s, err = l.begin(); err != nil {
				return err
			}
			started = time.Now()
		}
		if tick == nil {
			if l.call(ctx, s, down()) {
				time.Sleep(time.Millisecond)
			}
			continue
		}
		// Each call from its own goroutine, so that a slow one does not
		// lower the replica's rate.
		cur := s
		cur.inFlight.Go(func() { l.call(ctx, cur, down()) })
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return nil
}

// call makes one call at since and counts what it met; it reports whether
// the breaker rejected it.
func (l *tripLoop) call(ctx context.Context, s *tripStart, since time.Duration) bool {
	made := time.Now()
	a := l.dep.answer(l.i, since)
	if l.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.deadline)
		defer cancel()
	}
	let := func() {
		if a.hang {
			l.hung(s, since)
		}
	}
	var err error
	if s.conn != nil {
		err = a.stream(ctx, s.stream, s.conn, let)
	} else {
		err = s.unary(ctx, tripScope, nil, nil, nil, a.invoker(let))
	}
	rejected := l.kind.rejected(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if rejected {
		l.rejected++
	}
	if l.bad {
		l.countBad(s, a, rejected, made)
		return rejected
	}
	switch phase, into := l.dep.phase(since); phase {
	case phaseHealthy:
		if rejected {
			l.healthyRejected++
		}
	case phaseDown, phaseRelapsed:
		o := &l.outages[0]
		if phase == phaseRelapsed {
			o = &l.outages[1]
		}
		switch {
		case !rejected:
			if a.fail || a.slow > 0 {
				o.failedSince++
			}
			if phase == phaseDown && !l.dep.spared(l.i) {
				l.downServed = append(l.downServed, since)
			}
		case o.stopped < 0:
			o.stopped, o.absorbed = into, o.failedSince
		}
		if rejected && l.dep.spared(l.i) {
			l.sparedRejected++
		}
	case phaseRecovered:
		l.recoveredCalls++
		switch {
		case rejected:
			l.recoveredRejected++
		case l.served < 0 || into < l.served:
			// Calls run each in a goroutine: the first made may be
			// counted after a later one.
			l.served = into
		}
	}
	return rejected
}

// hung counts a call made at since that hangs as it is let through: it
// returns only when its context ends, after its replica may have
// stopped.
func (l *tripLoop) hung(s *tripStart, since time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bad {
		s.failed++
		return
	}
	switch phase, _ := l.dep.phase(since); phase {
	case phaseDown:
		l.outages[0].failedSince++
		l.outages[0].hung++
	case phaseRelapsed:
		l.outages[1].failedSince++
		l.outages[1].hung++
	}
}

// countBad counts a call of a bad replica made at made: its start's
// failures until the start's first rejection (its hung calls counted as
// they were let through), and when it first rejected.
func (l *tripLoop) countBad(s *tripStart, a answer, rejected bool, made time.Time) {
	switch {
	case !rejected:
		if a.fail {
			s.failed++
		}
		return
	case !s.rejected:
		s.rejected, l.seen = true, true
		l.failures += s.failed
	}
	// Calls run each in a goroutine: the first made may be counted after
	// a later one.
	if at := made.Sub(l.began); l.badStopped < 0 || at < l.badStopped {
		l.badStopped = at
	}
}
