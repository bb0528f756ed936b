package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// Manual states never expire in Redis: their keys lose any TTL, and get it
// back once the breaker is closed again.
func TestManualStatesNeverExpire(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := tripPolicy()
	note := coordinator.Note{By: "test", Reason: "never expires"}
	ttls := func(what string, persist bool) {
		t.Helper()
		keys := scopeKeys(t, rdb, cbredis.DefaultPrefix)
		if len(keys) == 0 {
			t.Fatalf("%s: no keys", what)
		}
		for _, k := range keys {
			ttl := rdb.PTTL(ctx, k).Val()
			if persist != (ttl < 0) {
				t.Errorf("%s: PTTL %s = %v; want none: %v", what, k, ttl, persist)
			}
		}
	}
	batch := coordinator.WithBatchID(ctx, "b1")
	if _, err := c.Record(batch, "s", p, []coordinator.Outcome{{Generation: born(t, c, "s", p)}}); err != nil {
		t.Fatal(err)
	}
	ttls("closed", false)
	res, err := c.Disable(ctx, "s", p, note)
	if err != nil {
		t.Fatal(err)
	}
	ttls("disabled", true)
	if _, err := c.Record(coordinator.WithBatchID(ctx, "b2"), "s", p, failures(res.Generation, 5)); err != nil {
		t.Fatal(err)
	}
	ttls("disabled, after Record", true)
	if _, err := c.Enable(ctx, "s", p, coordinator.Note{}); err != nil {
		t.Fatal(err)
	}
	ttls("enabled", false)
	if _, err := c.Isolate(ctx, "s", p, note); err != nil {
		t.Fatal(err)
	}
	ttls("isolated", true)
	res, err = c.Release(ctx, "s", p, coordinator.Note{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transition == nil || res.State != coordinator.StateClosed {
		t.Fatalf("Release = %+v; want closed", res)
	}
	ttls("released", false)
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		if strings.HasSuffix(k, ":state") && rdb.HExists(ctx, k, "note_reason").Val() {
			t.Errorf("state hash %s keeps the operator's note after the release", k)
		}
	}
}

// A lost isolated state restarts closed, as any lost state does.
func TestLostIsolationRestartsClosed(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := tripPolicy()
	res, err := c.Isolate(ctx, "s", p, coordinator.Note{Reason: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	var stateKey string
	for _, k := range scopeKeys(t, rdb, cbredis.DefaultPrefix) {
		if rdb.HExists(ctx, k, "scope").Val() {
			stateKey = k
		}
	}
	rdb.Del(ctx, stateKey)
	d, err := c.Admit(ctx, "s", p, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != coordinator.Allow || d.State != coordinator.StateClosed || d.Generation <= res.Generation {
		t.Fatalf("Admit after losing the isolated state (generation %d) = %+v; want Allow, closed, in a newer generation", res.Generation, d)
	}
}

func TestListStandalone(t *testing.T) {
	testList(t, redistest.Start(t).Client(t))
}

func TestListCluster(t *testing.T) {
	testList(t, redistest.StartCluster(t).Client(t))
}

// testList lists scopes in every state, under a prefix with glob
// characters, beside another deployment's scopes and a forgotten one.
func testList(t *testing.T, rdb goredis.UniversalClient) {
	ctx := context.Background()
	clk := coordinatortest.NewClock()
	const prefix = "li*st?[x]\\:"
	c := cbredis.New(rdb, cbredis.WithClock(clk.Now), cbredis.WithPrefix(prefix))
	other := cbredis.New(rdb, cbredis.WithClock(clk.Now), cbredis.WithPrefix("lixst:"))
	p := tripPolicy()
	note := coordinator.Note{By: "ops", Reason: "listing"}

	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Admit(ctx, "forgotten", p, "c"))
	clk.Advance(p.Window)
	gen := born(t, c, "closed", p)
	must(c.Record(ctx, "closed", p, []coordinator.Outcome{{Generation: gen}, {Generation: gen, Failure: true}}))
	must(c.Record(ctx, "open {x}", p, failures(born(t, c, "open {x}", p), 2)))
	must(c.Isolate(ctx, "isolated", p, note))
	must(c.Disable(ctx, "disabled", p, note))
	must(other.Isolate(ctx, "elsewhere", p, note))
	var many []string
	for i := range 50 {
		s := fmt.Sprintf("svc-%02d/pkg.Service/Method", i)
		many = append(many, s)
		must(c.Record(ctx, s, p, failures(born(t, c, s, p), 2)))
	}

	list, err := c.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]coordinator.Snapshot{}
	var names []string
	for _, s := range list {
		got[s.Scope] = s
		names = append(names, s.Scope)
	}
	want := append([]string{"closed", "disabled", "isolated", "open {x}"}, many...)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("List scopes = %q; want %q", names, want)
	}
	for scope, st := range map[string]coordinator.State{
		"closed": coordinator.StateClosed, "open {x}": coordinator.StateOpen,
		"isolated": coordinator.StateIsolated, "disabled": coordinator.StateDisabled,
	} {
		if got[scope].State != st {
			t.Errorf("List: %q is %v; want %v", scope, got[scope].State, st)
		}
	}
	if s := got["closed"]; s.Calls != 2 || s.Failures != 1 {
		t.Errorf("List: closed scope %+v; want its window counts", s)
	}
	if s := got["isolated"]; s.Operator != note || s.ForcedAt.IsZero() {
		t.Errorf("List: isolated scope %+v; want the operator's note", s)
	}

	bad := p
	bad.Buckets = 0
	if _, err := c.List(ctx, bad); err == nil {
		t.Error("List with an invalid policy: no error")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.List(cancelled, p); err == nil {
		t.Error("List with a cancelled context: no error")
	}
}
