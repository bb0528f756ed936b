package redis_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// tripPolicy trips on two failures in a row and probes with two slots.
func tripPolicy() coordinator.Policy {
	return coordinator.Policy{
		Window:              10 * time.Second,
		Buckets:             10,
		ConsecutiveFailures: 2,
		OpenFor:             time.Second,
		Probes:              2,
		ProbeLease:          time.Second,
		ProbeSuccesses:      2,
	}
}

// born admits a call to scope, which gives birth to a scope that is not
// born, and returns the generation it answered.
func born(t *testing.T, c coordinator.Coordinator, scope string, p coordinator.Policy) uint64 {
	t.Helper()
	d, err := c.Admit(t.Context(), coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "born"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation == 0 {
		t.Fatalf("Admit of %q = %+v: generation 0", scope, d)
	}
	return d.Generation
}

func failures(gen uint64, n int) []coordinator.Outcome {
	os := make([]coordinator.Outcome, n)
	for i := range os {
		os[i] = coordinator.Outcome{Generation: gen, Failure: true}
	}
	return os
}

// scopeKeys lists the keys under prefix.
func scopeKeys(t *testing.T, rdb goredis.UniversalClient, prefix string) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestOpenStateNeverExpires(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := tripPolicy()
	gen := born(t, c, "s", p)
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}, BatchID: "b1"}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(gen, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transition == nil || res.Transition.To != coordinator.StateOpen {
		t.Fatalf("Record = %+v, want a trip", res)
	}
	keys := scopeKeys(t, rdb, cbredis.DefaultPrefix)
	if len(keys) == 0 {
		t.Fatal("no keys after a trip")
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1*time.Nanosecond && ttl != -1*time.Millisecond {
			t.Errorf("PTTL %s = %v after the breaker opened, want none", k, ttl)
		}
	}
}

func TestWrongTypeIsAnError(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := tripPolicy()
	gen := born(t, c, "s", p)
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		rdb.Del(ctx, k)
		rdb.Set(ctx, k, "garbage", 0)
	}
	ops := map[string]func() error{
		"admit": func() error {
			_, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "c"})
			return err
		},
		"record": func() error {
			_, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{}}})
			return err
		},
		"settle": func() error {
			_, err := c.Settle(ctx, coordinator.SettleRequest{Scope: "s", Policy: p, Claim: "c", Outcome: coordinator.Outcome{}})
			return err
		},
		"snapshot": func() error { _, err := c.Snapshot(ctx, "s", p); return err },
	}
	for op, f := range ops {
		err := f()
		if err == nil {
			t.Errorf("%s over a string key: no error", op)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, op+` "s"`) || !strings.Contains(msg, "WRONGTYPE") {
			t.Errorf("%s: error %q names neither the operation and scope nor the cause", op, msg)
		}
		if !errors.Is(err, coordinator.ErrCorruptState) {
			t.Errorf("%s: error %q does not wrap ErrCorruptState", op, err)
		}
	}
}

// TestJunkNumberIsCorruptState: a number the scripts read from one
// scope's hashes that is not one makes every operation on that scope fail
// with ErrCorruptState naming the field, not with a malformed reply that
// reads as Redis failing, and leaves every other scope working.
func TestJunkNumberIsCorruptState(t *testing.T) {
	every := []string{"admit", "record", "settle", "snapshot"}
	for _, junk := range []struct {
		part, field, value string
		ops                []string // those that read the field
	}{
		{"state", "generation", "1e20", every},       // past int64: Redis would reply a negative integer
		{"policy", "version", "not a number", every}, // tonumber is nil: the reply would end early
		// A closed scope's admission reads neither, nor its settlement the window.
		{"state", "open_until", "tomorrow", every[1:]},
		{"window", "width", "100000000000000000000", []string{"record", "snapshot"}}, // digits past 2^53
	} {
		t.Run(junk.part+"."+junk.field, func(t *testing.T) {
			ctx := context.Background()
			rdb := redistest.Start(t).Client(t)
			c := cbredis.New(rdb)
			p := tripPolicy()
			gen := born(t, c, "bad", p)
			born(t, c, "good", p)
			if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "bad", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}}); err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, redistest.ScopeKey(cbredis.DefaultPrefix, "bad", junk.part), junk.field, junk.value).Err(); err != nil {
				t.Fatal(err)
			}
			ops := map[string]func(scope string) error{
				"admit": func(scope string) error {
					_, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "c"})
					return err
				},
				"record": func(scope string) error {
					_, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}})
					return err
				},
				"settle": func(scope string) error {
					_, err := c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: "c", Outcome: coordinator.Outcome{}})
					return err
				},
				"snapshot": func(scope string) error { _, err := c.Snapshot(ctx, scope, p); return err },
			}
			for _, op := range junk.ops {
				f := ops[op]
				err := f("bad")
				if !errors.Is(err, coordinator.ErrCorruptState) {
					t.Errorf("%s over %s %s = %q: %v, want ErrCorruptState", op, junk.part, junk.field, junk.value, err)
				} else if msg := err.Error(); !strings.Contains(msg, op+` "bad"`) || !strings.Contains(msg, junk.field) {
					t.Errorf("%s: error %q names neither the operation and scope nor the field", op, msg)
				}
				if err := f("good"); err != nil {
					t.Errorf("%s of a healthy scope beside a corrupt one: %v", op, err)
				}
			}
		})
	}
}

func TestInvalidPolicyIsAnError(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	_, err := c.Admit(context.Background(), coordinator.AdmitRequest{Scope: "s", Policy: coordinator.Policy{}, Claim: "c"})
	if !errors.Is(err, coordinator.ErrInvalidPolicy) {
		t.Fatalf("Admit with a zero policy: %v, want ErrInvalidPolicy", err)
	}
}

func TestPrefixKeepsDeploymentsApart(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	a, b := cbredis.New(rdb, cbredis.WithPrefix("a:")), cbredis.New(rdb, cbredis.WithPrefix("b:"))
	p := tripPolicy()
	if _, err := a.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(born(t, a, "s", p), 2)}); err != nil {
		t.Fatal(err)
	}
	s, err := b.Snapshot(ctx, "s", p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, coordinator.Snapshot{Scope: "s"}) {
		t.Fatalf("prefix b: %+v, want a scope not born: a's trip leaked", s)
	}
	if len(scopeKeys(t, rdb, "a:")) == 0 {
		t.Fatal("no keys under prefix a:")
	}
}

func TestPrefixWithBracePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with prefix \"x{\" did not panic")
		}
	}()
	cbredis.New(goredis.NewClient(&goredis.Options{}), cbredis.WithPrefix("x{"))
}

// TestConcurrentHalfOpen hammers one half-open scope from 32 clients: at
// no moment do more than Probes claims hold a slot. The clock stands still,
// so no lease runs out and a slot is free only once its holder settles.
func TestConcurrentHalfOpen(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	clk := coordinatortest.NewClock()
	p := tripPolicy()
	p.Probes, p.ProbeSuccesses = 3, 1<<20
	setup := cbredis.New(srv.Client(t), cbredis.WithClock(clk.Now))
	if _, err := setup.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(born(t, setup, "s", p), 2)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(p.OpenFor)

	var (
		held, maxHeld, probes atomic.Int64
		wg                    sync.WaitGroup
	)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cbredis.New(srv.Client(t), cbredis.WithClock(clk.Now))
			for i := range 40 {
				claim := fmt.Sprintf("g%d-%d", g, i)
				d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: claim})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Verdict != coordinator.Probe {
					continue
				}
				probes.Add(1)
				n := held.Add(1)
				for m := maxHeld.Load(); n > m && !maxHeld.CompareAndSwap(m, n); m = maxHeld.Load() {
				}
				// A retried admission holds the same slot.
				if d2, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: claim}); err != nil || d2.Verdict != coordinator.Probe {
					t.Errorf("re-admitting %s: %+v, %v; want Probe", claim, d2, err)
				}
				// Count the slot free before Redis frees it, so that the
				// count never runs behind Redis.
				held.Add(-1)
				res, err := c.Settle(ctx, coordinator.SettleRequest{Scope: "s", Policy: p, Claim: claim, Outcome: coordinator.Outcome{Generation: d.Generation}})
				if err != nil || res.Stale != 0 {
					t.Errorf("settle %s: %+v, %v", claim, res, err)
				}
			}
		}()
	}
	wg.Wait()
	if maxHeld.Load() > int64(p.Probes) {
		t.Fatalf("%d probe slots held at once, want at most %d", maxHeld.Load(), p.Probes)
	}
	if probes.Load() < int64(p.Probes) {
		t.Fatalf("only %d probes admitted", probes.Load())
	}
	snap, err := setup.Snapshot(ctx, "s", p)
	if err != nil {
		t.Fatal(err)
	}
	if snap.ProbesInFlight != 0 || snap.ProbeSuccesses != int(probes.Load()) {
		t.Fatalf("snapshot %+v after %d settled probes", snap, probes.Load())
	}
}

// TestConcurrentTripOnce sends failures from 32 clients at once: exactly
// one Record reports the closed->open transition.
func TestConcurrentTripOnce(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	p := tripPolicy()
	p.ConsecutiveFailures = 0
	p.MinCalls, p.FailureRatio = 10, 0.5
	gen := born(t, cbredis.New(srv.Client(t)), "s", p)
	var trips, recorded atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cbredis.New(srv.Client(t))
			for range 5 {
				res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(gen, 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Stale == 0 {
					recorded.Add(1)
				}
				if tr := res.Transition; tr != nil {
					if tr.From != coordinator.StateClosed || tr.To != coordinator.StateOpen {
						t.Errorf("transition %v -> %v", tr.From, tr.To)
					}
					trips.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if trips.Load() != 1 || recorded.Load() != int64(p.MinCalls) {
		t.Fatalf("%d trips after %d counted outcomes, want 1 after %d", trips.Load(), recorded.Load(), p.MinCalls)
	}
}

// dirty is how many writes the server has applied (its count of changes
// since the last save, which never happens in tests).
func dirty(t *testing.T, rdb *goredis.Client) string {
	t.Helper()
	info, err := rdb.Info(context.Background(), "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "rdb_changes_since_last_save:"); ok {
			return v
		}
	}
	t.Fatal("INFO persistence without rdb_changes_since_last_save")
	return ""
}

// The closed path of Admit writes nothing, once the scope is born; nor
// does looking at a scope that is not born.
func TestClosedAdmitWritesNothing(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := tripPolicy()
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: born(t, c, "s", p)}}}); err != nil {
		t.Fatal(err)
	}
	born(t, c, "admitted only", p)
	before := dirty(t, rdb)
	for i := range 10 {
		for _, scope := range []string{"s", "admitted only"} {
			if d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: fmt.Sprint(i)}); err != nil || d.Verdict != coordinator.Allow {
				t.Fatalf("Admit %q = %+v, %v", scope, d, err)
			}
		}
		if s, err := c.Snapshot(ctx, "never seen", p); err != nil || !reflect.DeepEqual(s, coordinator.Snapshot{Scope: "never seen"}) {
			t.Fatalf("Snapshot of a scope never seen = %+v, %v; want it not born", s, err)
		}
	}
	if after := dirty(t, rdb); after != before {
		t.Fatalf("closed admissions wrote: %s changes before, %s after", before, after)
	}
}

func TestHugeScope(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := tripPolicy()
	scope := strings.Repeat("{x}|\n", 1<<20) // 5 MiB
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: failures(born(t, c, scope, p), 2)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transition == nil || res.Transition.Scope != scope {
		t.Fatalf("Record = %+v, want a trip", res)
	}
	s, err := c.Snapshot(ctx, scope, p)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != coordinator.StateOpen || s.Scope != scope {
		t.Fatalf("Snapshot state %v", s.State)
	}
	keys := scopeKeys(t, rdb, cbredis.DefaultPrefix)
	var state string
	for _, k := range keys {
		if len(k) > 100 {
			t.Fatalf("key %.200q is long", k)
		}
		if strings.HasSuffix(k, ":state") {
			state = k
		}
	}
	if got := rdb.HGet(ctx, state, "scope").Val(); got != scope {
		t.Fatalf("stored scope has %d bytes, want %d", len(got), len(scope))
	}
	if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "other", Policy: coordinator.Policy{}, Claim: "c"}); err == nil {
		t.Fatal("no error for a zero policy")
	}
	_, err = c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: coordinator.Policy{}, Claim: "c"})
	if err == nil || len(err.Error()) > 1000 {
		t.Fatalf("error for a huge scope is %d bytes, want it cut short", len(fmt.Sprint(err)))
	}
}
