package cbgrpc

import (
	"context"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// Stalls (docs/architecture.md, "Stalls"): a dependency that stops
// answering has no outcomes until its callers' deadlines. A call still
// running past how long the scope's calls take when healthy is reported
// to the coordinator as stalled while it runs, once, and counts as a
// failure there; when it ends, its outcome is not sent again.
//
// Each watched scope keeps a ring of ticks: a call adds itself to the
// started count of the tick it was admitted in, and to the ended count of
// that tick when it arrives (a unary call ends; a stream gets its first
// message or header, or ends). Once a tick is the threshold old, the
// watcher marks it reported and sends what it holds in flight as stalled
// calls; a call that arrives in a reported tick sends no outcome. On a
// call's path that is two atomic additions, and a clock read for one call
// in stallSampleEvery, whose latency the threshold is learned from.

const (
	stallTickShift = 24  // a tick is 2^24 ns, about 16.8ms
	stallSlots     = 512 // the ring: about 8.6s of ticks
	// stallAhead is how many ticks the watcher readies ahead of the
	// clock: a call in a tick not readied (the watcher starved for that
	// long) is not watched.
	stallAhead = 16
	// stallMaxTicks is the longest threshold the ring can watch, leaving
	// room for the ticks readied ahead.
	stallMaxTicks = stallSlots - stallAhead - 2
	// stallFloor is the shortest threshold learned: below it, a pause of
	// the dependency (a collection, a failover) would read as a stall.
	stallFloor = 100 * time.Millisecond
	// stallTimes: the learned threshold is this many times the top of
	// the octave that holds the 99th percentile of healthy latency.
	stallTimes = 3
	// stallSamples is how many samples the threshold is learned from
	// before the watch starts.
	stallSamples = 64
	// stallSampleEvery: one call in this many has its latency sampled.
	stallSampleEvery = 8
)

// StallsOff, given to [WithStallAfter], turns the stall watch off.
const StallsOff time.Duration = -1

// WithStallAfter sets how long a call may run before this replica reports
// it to the coordinator as stalled, which counts as a failure (a dependency
// that stops answering is tripped within a second, not at its callers'
// deadlines); [StallsOff] turns the watch off. By default a scope whose
// policy sets SlowCallDuration is watched at that duration, and any other
// at three times the top of its healthy latency's 99th percentile, learned
// from its calls (its octave: a p99 of 100ms gives 403ms), and at least
// 100ms; a scope is watched once 64 of its calls were sampled. A threshold
// above 8s is not watched, nor is any call of a scope before one of its
// calls was answered (a cold connection is no stall). Streams are watched
// until their first message or header. Calls already running are never cancelled: their deadlines stay
// the caller's.
func WithStallAfter(d time.Duration) Option {
	return optionFunc(func(c *config) { c.stallAfter, c.stallAfterSet = d, true })
}

// validStallAfter reports what WithStallAfter cannot take.
func validStallAfter(c *config) error {
	switch d := c.stallAfter; {
	case !c.stallAfterSet || d == StallsOff:
		return nil
	case d < time.Millisecond:
		return fmt.Errorf("cbgrpc: WithStallAfter: must be at least 1ms, or StallsOff; got %v", d)
	case d > stallMaxTicks<<stallTickShift:
		return fmt.Errorf("cbgrpc: WithStallAfter: at most %v can be watched; got %v (StallsOff turns the watch off)",
			time.Duration(stallMaxTicks<<stallTickShift).Truncate(time.Millisecond), d)
	}
	return nil
}

// stallWatch is one scope's watch: its ring of ticks and its learned
// latency. A row of the table holds it (known.stalls) once the scope has
// a call to watch.
type stallWatch struct {
	// after is the threshold in ticks, set by the watcher; 0: calls are
	// not watched (the latency is not learned yet, or the threshold is
	// beyond the ring).
	after atomic.Int64
	// answered: a call of the scope arrived. Until one does (a new
	// connection is still being dialled, say), no call is watched, whatever
	// the threshold.
	answered atomic.Bool
	slots    [stallSlots]stallSlot
	// latency counts sampled latencies by octave: [i] those below 2^i ns
	// and not below 2^(i-1).
	latency [40]atomic.Int64
	// checked is the last tick the watcher reported; its own.
	checked int64
}

// stallSlot is the calls admitted in one tick.
type stallSlot struct {
	tick           atomic.Int64 // the tick it counts; readied by the watcher
	started, ended atomic.Int64
	gen            atomic.Uint64 // the generation its calls were admitted under (the last)
	reported       atomic.Bool
}

func tickOf(i instant.Time) int64 { return int64(i) >> stallTickShift }

// slot is where the calls of tick t count. (A mask, not %: ticks are
// never negative, and % of a signed number costs a branch.)
func (w *stallWatch) slot(t int64) *stallSlot { return &w.slots[t&(stallSlots-1)] }

// watchOf returns the stall watch of row, made on first use; nil when the
// Breaker watches no stalls. A new one watches no call until the watcher
// sets its threshold, after one of its calls was answered.
func (b *Breaker) watchOf(row *known) *stallWatch {
	if row == nil || b.cfg.stallAfter == StallsOff {
		return nil
	}
	if w := row.stalls.Load(); w != nil {
		return w
	}
	w := &stallWatch{}
	w.ready(tickOf(instant.Now()))
	if !row.stalls.CompareAndSwap(nil, w) {
		return row.stalls.Load()
	}
	return w
}

// takeOff adds c, admitted closed, to the tick of its admission, if its
// scope is watched.
func (b *Breaker) takeOff(c *call) {
	if w := b.watchOf(c.row); w != nil {
		c.takeOff(w)
	}
}

// takeOff adds c to the tick of its admission in w, once w watches calls
// and the tick is readied.
func (c *call) takeOff(w *stallWatch) {
	c.watch = w
	if w.after.Load() == 0 {
		return
	}
	t := tickOf(c.start)
	s := w.slot(t)
	if s.tick.Load() != t {
		return
	}
	s.started.Add(1)
	if s.gen.Load() != c.gen {
		s.gen.Store(c.gen)
	}
	c.tick = t
}

// arrive notes that c's answer came (a unary call ended, a stream's first
// message or header came, or it ended), at now (zero: unread); the first
// time only, as it lets go of the watch. c.stalled then says whether c was
// reported stalled before: its outcome is not sent again. A call that
// arrived unreported may be a sample of the scope's healthy latency.
func (c *call) arrive(now instant.Time) {
	w := c.watch
	if w == nil {
		return
	}
	c.watch = nil
	if c.tick != 0 {
		s := w.slot(c.tick)
		if s.tick.Load() == c.tick {
			s.ended.Add(1)
			if c.stalled = s.reported.Load(); c.stalled {
				return
			}
		}
	} else if !w.answered.Load() {
		w.answered.Store(true)
	}
	// A sample: bits of when the call began, which a clock with
	// nanoseconds draws at random enough, and costs nothing to read.
	if (c.start>>4)%stallSampleEvery == 0 {
		if now == 0 {
			now = instant.Now()
		}
		w.latency[min(bits.Len64(uint64(max(now.Sub(c.start), 0))), len(w.latency)-1)].Add(1)
	}
}

// ready readies the ticks from now to stallAhead after it that are not
// yet: counts zeroed before the tick is set, so that a call that finds
// its tick finds it empty.
func (w *stallWatch) ready(now int64) {
	for t := now; t <= now+stallAhead; t++ {
		s := w.slot(t)
		if s.tick.Load() == t {
			continue
		}
		s.started.Store(0)
		s.ended.Store(0)
		s.gen.Store(0)
		s.reported.Store(false)
		s.tick.Store(t)
	}
}

// decay halves the learned latency's counts, so that what was learned
// fades over windows.
func (w *stallWatch) decay() {
	for i := range w.latency {
		if n := w.latency[i].Load(); n > 0 {
			w.latency[i].Add(-n / 2)
		}
	}
}

// threshold is how long a call of the scope may run before it is stalled,
// in ticks (0: not watched, as before any call of the scope was answered):
// set, the policy's SlowCallDuration, or learned from the latency.
func (w *stallWatch) threshold(set, slow time.Duration) int64 {
	var n [len(stallWatch{}.latency)]int64
	total := int64(0)
	for i := range w.latency {
		n[i] = w.latency[i].Load()
		total += n[i]
	}
	d := set
	switch {
	case !w.answered.Load():
		return 0
	case d > 0:
	case slow > 0:
		d = slow
	case total < stallSamples:
		return 0
	default:
		// The octave that holds the 99th percentile.
		below, i := int64(0), 0
		for ; i < len(n)-1; i++ {
			if below += n[i]; below*100 >= total*99 {
				break
			}
		}
		d = max(stallFloor, stallTimes*time.Duration(1)<<i)
	}
	ticks := (int64(d) + 1<<stallTickShift - 1) >> stallTickShift
	if ticks > stallMaxTicks {
		return 0
	}
	return ticks
}

// stalledTick is a tick found stalled: how many of its calls were still
// running, and under which generation.
type stalledTick struct {
	n   int64
	gen uint64
}

// check readies the ticks ahead of now, and reports every tick that
// turned the threshold old since the last check, marking it reported, and
// what it held in flight; after is the threshold in ticks.
func (w *stallWatch) check(now, after int64, found func(stalledTick)) {
	w.ready(now)
	if after == 0 {
		w.checked = now
		return
	}
	// A call admitted in tick t has run at least (now - t - 1) ticks.
	last := now - after - 1
	from := max(w.checked+1, last-stallSlots+stallAhead+2)
	for t := from; t <= last; t++ {
		s := w.slot(t)
		if s.tick.Load() != t || s.reported.Load() {
			continue
		}
		// Reported first: a call that ends after it sends nothing, and
		// one that ended before it is not counted below.
		s.reported.Store(true)
		if n := s.started.Load() - s.ended.Load(); n > 0 {
			found(stalledTick{n: n, gen: s.gen.Load()})
		}
	}
	w.checked = max(w.checked, last)
}

// watchStalls runs the stall watch of every scope in the table, once a
// tick, until ctx ends.
func (b *Breaker) watchStalls(ctx context.Context) {
	t := time.NewTicker(time.Duration(1) << stallTickShift)
	defer t.Stop()
	var watched []watchedScope
	lastDecay := instant.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := instant.Now()
		decay := now.Sub(lastDecay) >= b.known.idle/2
		if decay {
			lastDecay = now
		}
		watched = b.known.watched(watched[:0])
		for _, ws := range watched {
			if decay {
				ws.w.decay()
			}
			after := ws.w.threshold(b.cfg.stallAfter, ws.slow)
			ws.w.after.Store(after)
			ws.w.check(tickOf(now), after, func(st stalledTick) { b.stalled(ws.scope, st) })
		}
	}
}

// stalled sends a tick's stalled calls to the coordinator, each a failure,
// which the recorder sends at once.
func (b *Breaker) stalled(scope string, st stalledTick) {
	b.tel.stalls(scope, st.n)
	now := instant.Now()
	for range st.n {
		var it item
		it.scope, it.at = scope, now
		it.outcome.Generation, it.outcome.Stalled = st.gen, true
		it.verdict = b.known.failed(scope)
		b.rec.add(&it)
	}
}

// watchedScope is a scope whose calls are watched, with its policy's
// SlowCallDuration.
type watchedScope struct {
	scope string
	w     *stallWatch
	slow  time.Duration
}

// watched appends to list the scopes of the table that have a stall
// watch.
func (k *knowledge) watched(list []watchedScope) []watchedScope {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for scope, e := range k.scopes {
		if w := e.stalls.Load(); w != nil {
			list = append(list, watchedScope{scope: scope, w: w, slow: k.policyIn(&e.fact).p.SlowCallDuration})
		}
	}
	return list
}
