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

	mu              sync.Mutex
	calls, rejected int64
	healthyRejected int64
	sparedRejected  int64
	// failedSince counts the failing or slow calls served since the
	// dependency went down; stopped is the first rejection since then, absorbed the
	// count at that moment.
	failedSince int64
	stopped     time.Duration
	absorbed    int64
	// For a bad replica: its failing calls before each start's first
	// rejection, summed; seen, whether any start rejected; starts.
	failures int64
	seen     bool
	starts   int64
}

// tripStart is one start of a replica's breaker; a replica that restarts
// has several, one at a time.
type tripStart struct {
	call     grpc.UnaryClientInterceptor
	end      func()
	inFlight sync.WaitGroup
	// Under the loop's mu.
	failed   int64
	rejected bool
}

func newTripLoop(kind tripBreaker, i int, bad bool, dep tripDependency, restart time.Duration) *tripLoop {
	if !bad {
		restart = 0
	}
	return &tripLoop{kind: kind, i: i, bad: bad, dep: dep, restart: restart, stopped: -1}
}

func (l *tripLoop) begin() (*tripStart, error) {
	id := fmt.Sprintf("replica-%02d", l.i)
	if l.restart > 0 {
		id = fmt.Sprintf("replica-%02d-start-%d", l.i, l.starts)
	}
	call, end, err := l.kind.start(id)
	if err != nil {
		return nil, fmt.Errorf("%s breaker of %s: %w", l.kind.name, id, err)
	}
	l.starts++
	return &tripStart{call: call, end: end}, nil
}

// finish ends a start once its calls have returned, as a process that
// drains before it exits; a start that never rejected gave all its
// failures.
func (l *tripLoop) finish(s *tripStart) {
	s.inFlight.Wait()
	s.end()
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
	a := l.dep.answer(l.i, since)
	err := s.call(ctx, tripScope, nil, nil, nil, a.invoker())
	rejected := l.kind.rejected(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	switch {
	case !rejected:
		if a.fail {
			s.failed++
		}
		if (a.fail || a.slow > 0) && since >= 0 && !l.bad {
			l.failedSince++
		}
		return false
	case l.bad:
		if !s.rejected {
			s.rejected, l.seen = true, true
			l.failures += s.failed
		}
	case since < 0:
		l.healthyRejected++
	default:
		if l.dep.spared(l.i) {
			l.sparedRejected++
		}
		if l.stopped < 0 {
			l.stopped, l.absorbed = since, l.failedSince
		}
	}
	l.rejected++
	return true
}
