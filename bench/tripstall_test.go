package bench

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestTripStallSmoke stalls a small fleet's dependency, unary calls and
// server streams, for less than the calls' deadline, so that no call that
// reached it returns before the run ends. The local peers learn only from
// calls that return: they never stop, and every call they let through
// after the onset hung and counts as absorbed. The run cancels the calls
// still hanging at its end and leaves no goroutine behind.
func TestTripStallSmoke(t *testing.T) {
	const (
		replicas = 2
		rate     = 50
		down     = 1500 * time.Millisecond
	)
	for _, stream := range []bool{false, true} {
		name := "unary"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			before := tripGoroutines()
			row := runTrip(t, TripConfig{Replicas: replicas, Rate: rate, Spell: time.Second, Down: down, Stall: true, Deadline: 10 * time.Second,
				Stream: stream, Peers: true})
			noGoroutinesLeft(t, before)
			if row.Hung == 0 || row.Hung < row.Absorbed || row.HealthyRejected != 0 {
				t.Errorf("cbgrpc: %d calls into the hole, %d absorbed, %d healthy calls rejected; want some, at least the absorbed, none",
					row.Hung, row.Absorbed, row.HealthyRejected)
			}
			if len(row.Peers) != 2 {
				t.Fatalf("%d peer rows; want 2", len(row.Peers))
			}
			// Half the calls the outage should see, for a loaded machine.
			least := int64(replicas * rate * down.Seconds() / 2)
			for _, p := range row.Peers {
				if p.LastStopped >= 0 || p.Hung < least || p.Absorbed != p.Hung || p.HealthyRejected != 0 {
					t.Errorf("%s: last stopped %v, %d calls into the hole, %d absorbed, %d healthy calls rejected; want never stopped, at least %d into the hole, all absorbed, none rejected",
						p.Breaker, p.LastStopped, p.Hung, p.Absorbed, p.HealthyRejected, least)
				}
			}
		})
	}
}

// TestTripStallAloneSmoke runs a replica whose own calls hang beside
// healthy ones: no healthy call is rejected, the peers never learn of the
// hung calls within their deadline, and a bad replica's count of hung
// calls and the moment it stopped agree on whether it stopped.
func TestTripStallAloneSmoke(t *testing.T) {
	before := tripGoroutines()
	row := runTrip(t, TripConfig{Replicas: 3, Rate: 50, Spell: 1500 * time.Millisecond, Bad: 1, BadRate: 50, Stall: true, Deadline: 10 * time.Second, Peers: true})
	noGoroutinesLeft(t, before)
	for _, b := range append([]TripBreakerRow{row.TripBreakerRow}, row.Peers...) {
		if b.HealthyRejected != 0 || len(b.BadFailures) != 1 || len(b.BadStopped) != 1 || (b.BadFailures[0] < 0) != (b.BadStopped[0] < 0) {
			t.Errorf("%s: %d healthy calls rejected, bad replica's hung calls %v, stopped %v; want none rejected, and one of each, agreeing",
				b.Breaker, b.HealthyRejected, b.BadFailures, b.BadStopped)
		}
	}
	for _, p := range row.Peers {
		if p.BadFailures[0] != -1 {
			t.Errorf("%s: the bad replica stopped after %d hung calls; want never", p.Breaker, p.BadFailures[0])
		}
	}
}

// TestTripStallDependency draws the stub dependency's answers in a stall
// and with a healthy latency: a stall hangs the calls the outage fails and
// every call of a bad replica, while the noise still fails; a log-normal
// latency has its median, and its 99th percentile at e^(2.326 sigma)
// times it.
func TestTripStallDependency(t *testing.T) {
	base := TripConfig{Replicas: 4, Rate: 50, Noise: 0.05, Spell: time.Second, Down: 10 * time.Second, Stall: true, Deadline: 10 * time.Second}
	with := func(edit func(*TripConfig)) TripConfig {
		c := base
		edit(&c)
		return c
	}
	const n = 20000
	// Five standard deviations of a share of n draws at most.
	tolerance := 5 * math.Sqrt(0.25/n)
	for _, c := range []struct {
		name           string
		cfg            TripConfig
		replica        int
		since          time.Duration
		hangs, failing float64
	}{
		{"healthy before the stall", base, 0, -time.Second, 0, 0.05},
		{"stalled", base, 0, time.Second, 1, 0},
		{"a stalled brownout", with(func(c *TripConfig) { c.Share = 0.6 }), 0, time.Second, 0.6, 0.4 * 0.05},
		{"bad replica", with(func(c *TripConfig) { c.Bad, c.BadRate = 1, 50 }), 0, -time.Second, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.validate(); err != nil {
				t.Fatal(err)
			}
			d := newTripDependency(c.cfg)
			var hangs, failing int
			for range n {
				a := d.answer(c.replica, c.since)
				if a.hang {
					hangs++
				}
				if a.fail {
					failing++
				}
			}
			if got := float64(hangs) / n; math.Abs(got-c.hangs) > tolerance {
				t.Errorf("%.3f of the calls hang; want %.3f", got, c.hangs)
			}
			if got := float64(failing) / n; math.Abs(got-c.failing) > tolerance {
				t.Errorf("%.3f of the calls fail; want %.3f", got, c.failing)
			}
		})
	}
	t.Run("log-normal latency", func(t *testing.T) {
		const median, sigma = 5 * time.Millisecond, 0.5
		d := newTripDependency(TripConfig{Replicas: 1, Rate: 50, Spell: time.Second, Latency: median, LatencySigma: sigma})
		p99 := time.Duration(float64(median) * math.Exp(2.326*sigma))
		var below, belowP99 int
		for range n {
			a := d.answer(0, -time.Second)
			if a.latency < median {
				below++
			}
			if a.latency < p99 {
				belowP99++
			}
		}
		if got := float64(below) / n; math.Abs(got-0.5) > tolerance {
			t.Errorf("%.3f of the calls take less than the median; want 0.5", got)
		}
		if got := float64(belowP99) / n; math.Abs(got-0.99) > tolerance {
			t.Errorf("%.3f of the calls take less than %v; want 0.99", got, p99)
		}
	})
}

// TestTripStallConfig names the wrong field of a stall or a latency that
// cannot be run.
func TestTripStallConfig(t *testing.T) {
	base := TripConfig{Replicas: 2, Rate: 50, Spell: time.Second, Down: time.Second, Stall: true, Deadline: time.Second}
	for _, c := range []struct {
		field string
		edit  func(*TripConfig)
	}{
		{"Stall", func(c *TripConfig) { c.Down = 0 }},
		{"SlowShare", func(c *TripConfig) { c.SlowShare, c.SlowBy = 0.5, time.Second }},
		{"BadRate", func(c *TripConfig) { c.Bad = 1 }},
		{"Deadline", func(c *TripConfig) { c.Deadline = -time.Second }},
		{"Latency", func(c *TripConfig) { c.Latency = -time.Second }},
		{"LatencySigma", func(c *TripConfig) { c.LatencySigma = 0.5 }},
	} {
		cfg := base
		c.edit(&cfg)
		if err := cfg.validate(); err == nil || !strings.HasPrefix(err.Error(), "trip: "+c.field+" ") {
			t.Errorf("%+v: %v; want an error naming %s", cfg, err, c.field)
		}
	}
	if err := base.validate(); err != nil {
		t.Errorf("a stall: %v", err)
	}
}

// tripGoroutines are the goroutines running this module's code or gRPC's,
// but the caller's, by their first line ("goroutine 7 [select]:").
func tripGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ours := make(map[string]string)
	// The caller's goroutine comes first.
	for _, g := range strings.Split(string(buf), "\n\n")[1:] {
		if strings.Contains(g, "github.com/cbgrpc/cbgrpc") || strings.Contains(g, "google.golang.org/grpc") {
			id, _, _ := strings.Cut(g, " [")
			ours[id] = g
		}
	}
	return ours
}

// noGoroutinesLeft fails if a goroutine of tripGoroutines that was not
// running before is still running, once they have had two seconds to end.
func noGoroutinesLeft(t *testing.T, before map[string]string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(2 * time.Second); ; {
		left = left[:0]
		for id, g := range tripGoroutines() {
			if _, old := before[id]; !old {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines left after the run:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
