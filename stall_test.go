package cbgrpc

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// learn adds n latencies drawn by draw to w, as arrive samples them: the
// calls begin at an instant arrive takes for a sample.
func learn(t *testing.T, w *stallWatch, n int, draw func() time.Duration) {
	for range n {
		before := total(w)
		c := call{watch: w, start: 1 << 40}
		c.arrive(c.start.Add(draw()))
		if total(w) != before+1 {
			t.Fatal("a call begun at 1<<40 was not sampled")
		}
	}
}

func total(w *stallWatch) int64 {
	n := int64(0)
	for i := range w.latency {
		n += w.latency[i].Load()
	}
	return n
}

func ticks(d time.Duration) int64 { return (int64(d) + 1<<stallTickShift - 1) >> stallTickShift }

// The threshold: set, the policy's SlowCallDuration, or three times the
// top of the octave of the learned p99, at least stallFloor; none before
// stallSamples samples, nor beyond what the ring holds.
func TestStallThreshold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Log-normal with median 5ms and p99 100ms.
	sigma := math.Log(20) / 2.326
	longTail := func() time.Duration {
		return time.Duration(5e6 * math.Exp(sigma*rng.NormFloat64()))
	}
	for _, tc := range []struct {
		name      string
		samples   int
		draw      func() time.Duration
		set, slow time.Duration
		want      int64
	}{
		{"too few samples", stallSamples - 1, longTail, 0, 0, 0},
		{"long tail", 2000, longTail, 0, 0, ticks(3 * time.Duration(1<<27))},
		{"fast calls: the floor", 2000, func() time.Duration { return time.Millisecond }, 0, 0, ticks(stallFloor)},
		{"2s calls", 2000, func() time.Duration { return 2 * time.Second }, 0, 0, ticks(3 * time.Duration(1<<31))},
		{"slower than the ring holds", 2000, func() time.Duration { return 4 * time.Second }, 0, 0, 0},
		{"SlowCallDuration", 1, longTail, 0, 250 * time.Millisecond, ticks(250 * time.Millisecond)},
		{"WithStallAfter before SlowCallDuration", 1, longTail, time.Second, 250 * time.Millisecond, ticks(time.Second)},
		{"set, but no call answered yet", 0, longTail, time.Second, 250 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w stallWatch
			learn(t, &w, tc.samples, tc.draw)
			if got := w.threshold(tc.set, tc.slow); got != tc.want {
				t.Errorf("threshold %d ticks (%v); want %d (%v)", got, time.Duration(got<<stallTickShift),
					tc.want, time.Duration(tc.want<<stallTickShift))
			}
		})
	}
	t.Run("decay halves what was learned", func(t *testing.T) {
		var w stallWatch
		learn(t, &w, 1000, func() time.Duration { return time.Millisecond })
		w.decay()
		if n := total(&w); n != 500 {
			t.Errorf("%d samples after a decay; want 500", n)
		}
	})
}

// A tick's calls in flight once it is the threshold old are stalled, each
// once: a call that arrives after that sends no outcome, one that
// arrived before is not counted, and a later check reports nothing again.
func TestStallWatchReportsATickOnce(t *testing.T) {
	var w stallWatch
	const start = 1000
	w.ready(start)
	w.after.Store(3)
	at := instant.Time(start << stallTickShift)
	var calls [5]call
	for i := range calls {
		calls[i] = call{start: at, gen: 7}
		calls[i].takeOff(&w)
	}
	if calls[0].tick != start {
		t.Fatalf("took off in tick %d; want %d", calls[0].tick, start)
	}
	if calls[0].arrive(at.Add(time.Millisecond)); calls[0].stalled {
		t.Error("a call that arrived before its tick was checked reads stalled")
	}
	// A call arrives once: told again (a stream's end after its first
	// message), it leaves the tick's count alone.
	calls[0].arrive(at.Add(2 * time.Millisecond))
	var found []stalledTick
	record := func(st stalledTick) { found = append(found, st) }
	w.check(start+3, 3, record)
	if len(found) != 0 {
		t.Fatalf("a tick 3 ticks old reported %+v; want nothing until it is over 3 ticks old", found)
	}
	w.check(start+4, 3, record)
	if len(found) != 1 || found[0].n != 4 || found[0].gen != 7 {
		t.Fatalf("reported %+v; want the 4 calls in flight, generation 7", found)
	}
	if calls[1].arrive(0); !calls[1].stalled {
		t.Error("a call that arrived after it was reported stalled reads not stalled")
	}
	w.check(start+10, 3, record)
	if len(found) != 1 {
		t.Errorf("reported again: %+v", found)
	}
}

// The ring is readied ahead of the clock, and a call in a tick the watcher
// has not readied is not watched.
func TestStallWatchLeavesUnreadiedTicksAlone(t *testing.T) {
	var w stallWatch
	w.ready(1000)
	w.after.Store(3)
	c := call{start: instant.Time((1000 + stallAhead + 1) << stallTickShift)}
	c.takeOff(&w)
	if c.tick != 0 {
		t.Errorf("took off in tick %d, which was not readied", c.tick)
	}
	c = call{start: instant.Time((1000 + stallAhead) << stallTickShift)}
	c.takeOff(&w)
	if c.tick != 1000+stallAhead {
		t.Errorf("took off in tick %d; want the last tick readied, %d", c.tick, 1000+stallAhead)
	}
}

// WithStallAfter refuses what cannot be watched, naming itself; StallsOff
// is no threshold but the watch turned off.
func TestWithStallAfterRefusesWhatCannotBeWatched(t *testing.T) {
	for _, d := range []time.Duration{0, -2, 999 * time.Microsecond, 9 * time.Second} {
		b, err := New(memory.New(), WithStallAfter(d))
		if err == nil {
			b.Close()
			t.Errorf("WithStallAfter(%v): New succeeded; want an error", d)
			continue
		}
		if !strings.Contains(err.Error(), "WithStallAfter") {
			t.Errorf("WithStallAfter(%v): %v; want the error to name the option", d, err)
		}
	}
	for _, d := range []time.Duration{StallsOff, time.Millisecond, 8 * time.Second} {
		b, err := New(memory.New(), WithStallAfter(d))
		if err != nil {
			t.Errorf("WithStallAfter(%v): %v", d, err)
			continue
		}
		b.Close()
	}
}
