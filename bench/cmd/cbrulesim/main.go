// Command cbrulesim measures the statistics of the fleet's trip rules
// over hours of simulated time: the in-process coordinator (the contract's
// reference model, which the Redis coordinator matches outcome for
// outcome) on a fake clock, fed by replicas that report as a Breaker's
// recorder does (a failure or slow call at once with the successes held
// before it, successes alone after the record interval, or after the calm
// interval while the window is calm). It reports how often a steady share
// of failures below FailureRatio trips the breaker (false trips per hour),
// and how soon a brownout after a healthy window trips it, with the calls
// that failed meanwhile. Fast enough for hundreds of simulated hours; the
// trip simulator (cbtripsim) measures the same over real Breakers and a
// real Redis, minutes at a time.
//
//	go run ./cmd/cbrulesim                          # default policy, 8 replicas x 50 calls/s
//	go run ./cmd/cbrulesim -hours 200 -shares 0.40,0.45
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// The recorder's pacing, as the Breaker's defaults (cbgrpc.DefaultRecordInterval
// and the calm interval of pace.go).
const (
	recordInterval = time.Second
	calmInterval   = 5 * time.Second
	tick           = time.Millisecond
)

type replica struct {
	id     string
	offset time.Duration // its calls come at offset + k × period
	held   []coordinator.Outcome
	since  time.Time // when the oldest held outcome ended
	calm   bool      // the last answer left the window calm
}

type fleet struct {
	c        *memory.Coordinator
	clock    *coordinatortest.Clock
	p        coordinator.Policy
	scope    string
	scopes   int
	gen      uint64
	replicas []*replica
	period   time.Duration
	rng      *rand.Rand
	// reason is why the breaker last tripped.
	reason string
}

func newFleet(p coordinator.Policy, replicas int, rate float64, seed uint64) *fleet {
	clock := coordinatortest.NewClock()
	f := &fleet{c: memory.New(memory.WithClock(clock.Now)), clock: clock, p: p,
		period: time.Duration(float64(time.Second) / rate), rng: rand.New(rand.NewPCG(seed, 1))}
	for i := range replicas {
		f.replicas = append(f.replicas, &replica{id: fmt.Sprintf("replica-%02d", i),
			offset: time.Duration(f.rng.Int64N(int64(f.period/tick))) * tick})
	}
	f.newScope()
	return f
}

// newScope starts a scope afresh: after a trip, the next stretch is
// measured on a breaker that has not tripped.
func (f *fleet) newScope() {
	f.scopes++
	f.scope = "cbrulesim/" + strconv.Itoa(f.scopes)
	d, err := f.c.Admit(context.Background(), coordinator.AdmitRequest{Scope: f.scope, Policy: f.p, Claim: "birth"})
	if err != nil {
		log.Fatal(err)
	}
	f.gen = d.Generation
	for _, r := range f.replicas {
		r.held, r.calm = nil, false
	}
}

// run calls for d at the failure share share(t) (t from the start of the
// run), and returns when the breaker first tripped (-1: it did not) and
// how many failed calls the dependency served until then.
func (f *fleet) run(d time.Duration, share func(time.Duration) float64) (time.Duration, int) {
	start := f.clock.Now()
	failed := 0
	for t := time.Duration(0); t < d; t += tick {
		now := start.Add(t)
		f.clock.Set(now)
		for _, r := range f.replicas {
			if (t-r.offset)%f.period != 0 || t < r.offset {
				continue
			}
			o := coordinator.Outcome{Generation: f.gen, Failure: f.rng.Float64() < share(t)}
			if o.Failure {
				failed++
			}
			if len(r.held) == 0 {
				r.since = now
			}
			r.held = append(r.held, o)
			wait := recordInterval
			if r.calm {
				wait = calmInterval
			}
			if !o.Failure && now.Sub(r.since) < wait {
				continue
			}
			res, err := f.c.Record(context.Background(), coordinator.RecordRequest{Scope: f.scope, Policy: f.p, Outcomes: r.held, Replica: r.id})
			if err != nil {
				log.Fatal(err)
			}
			r.held = r.held[:0]
			r.calm = res.State == coordinator.StateClosed && res.Calls > 0 && 2*res.Failures*1000 < int(f.p.FailureRatio*1000)*res.Calls
			if res.State != coordinator.StateClosed {
				if res.Transition != nil {
					f.reason = res.Transition.Reason
				}
				return t, failed
			}
		}
	}
	return -1, failed
}

func main() {
	replicas := flag.Int("replicas", 8, "replicas of the fleet")
	rate := flag.Float64("rate", 50, "calls per second of each replica")
	hours := flag.Float64("hours", 100, "simulated hours at each steady share")
	shares := flag.String("shares", "0.30,0.40,0.45", "steady shares of failures to count false trips at, separated by commas")
	onsets := flag.String("onsets", "0.60,0.80,1", "brownout shares to time after a healthy window, separated by commas")
	runs := flag.Int("runs", 200, "brownouts timed at each share")
	minCalls := flag.Int("min-calls", coordinator.DefaultPolicy().MinCalls, "the policy's MinCalls")
	flag.Parse()
	log.SetFlags(0)
	p := coordinator.DefaultPolicy()
	p.MinCalls = *minCalls
	fmt.Printf("%d replicas x %.0f calls/s, default policy with MinCalls %d; the recorder holds successes up to %v (%v while calm)\n\n",
		*replicas, *rate, p.MinCalls, recordInterval, calmInterval)

	// Each stretch starts on a scope that has run a window at the share
	// already: a young window judges a handful of calls, and the ratio
	// trips on 10 of 20 as often as luck makes them, which no fleet in a
	// steady state sees.
	fmt.Println("| steady share of failures | simulated hours | trips | trips per hour | by rule |")
	fmt.Println("|---:|---:|---:|---:|---|")
	for _, s := range parseShares(*shares) {
		f := newFleet(p, *replicas, *rate, 1)
		share := func(time.Duration) float64 { return s }
		trips, left, rules := 0, time.Duration(*hours*float64(time.Hour)), map[string]int{}
		for left > 0 {
			if at, _ := f.run(p.Window, share); at >= 0 {
				f.newScope()
				continue
			}
			at, _ := f.run(left, share)
			if at < 0 {
				break
			}
			trips++
			rules[strings.Fields(f.reason)[0]]++
			left -= at + tick
			f.newScope()
		}
		fmt.Printf("| %.0f %% | %.0f | %d | %.3f | %v |\n", 100*s, *hours, trips, float64(trips) / *hours, rules)
	}

	fmt.Println()
	fmt.Println("| brownout after a window of 5 % noise | runs | tripped | time to trip p50 / p90 / max | failed calls until then p50 / p90 |")
	fmt.Println("|---:|---:|---:|---|---|")
	for _, s := range parseShares(*onsets) {
		var times []time.Duration
		var failed []int
		for i := range *runs {
			f := newFleet(p, *replicas, *rate, uint64(i)+100)
			if at, _ := f.run(p.Window, func(time.Duration) float64 { return 0.05 }); at >= 0 {
				log.Fatalf("the healthy window tripped the breaker at %v", at)
			}
			at, n := f.run(p.Window, func(time.Duration) float64 { return s })
			if at >= 0 {
				times, failed = append(times, at), append(failed, n)
			}
		}
		slices.Sort(times)
		slices.Sort(failed)
		q := func(n int, f float64) int { return int(f * float64(n-1)) }
		if len(times) == 0 {
			fmt.Printf("| %.0f %% | %d | 0 | – | – |\n", 100*s, *runs)
			continue
		}
		fmt.Printf("| %.0f %% | %d | %d | %v / %v / %v | %d / %d |\n", 100*s, *runs, len(times),
			times[q(len(times), .5)], times[q(len(times), .9)], times[len(times)-1], failed[q(len(failed), .5)], failed[q(len(failed), .9)])
	}
}

func parseShares(s string) []float64 {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || x < 0 || x > 1 {
			log.Fatalf("a share must be a number from 0 to 1, got %q", f)
		}
		out = append(out, x)
	}
	return out
}
