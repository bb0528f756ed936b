package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: born(t, c, "s", p)}}, BatchID: "b1"}); err != nil {
		t.Fatal(err)
	}
	ttls("closed", false)
	res, err := c.Disable(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: note})
	if err != nil {
		t.Fatal(err)
	}
	ttls("disabled", true)
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: failures(res.Generation, 5), BatchID: "b2"}); err != nil {
		t.Fatal(err)
	}
	ttls("disabled, after Record", true)
	if _, err := c.Enable(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: coordinator.Note{}}); err != nil {
		t.Fatal(err)
	}
	ttls("enabled", false)
	if _, err := c.Isolate(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: note}); err != nil {
		t.Fatal(err)
	}
	ttls("isolated", true)
	res, err = c.Release(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: coordinator.Note{}})
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
	res, err := c.Isolate(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: coordinator.Note{Reason: "lost"}})
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
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "a"})
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
	must(c.Admit(ctx, coordinator.AdmitRequest{Scope: "forgotten", Policy: p, Claim: "c"}))
	clk.Advance(p.Window)
	gen := born(t, c, "closed", p)
	must(c.Record(ctx, coordinator.RecordRequest{Scope: "closed", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}, {Generation: gen, Failure: true}}}))
	must(c.Record(ctx, coordinator.RecordRequest{Scope: "open {x}", Policy: p, Outcomes: failures(born(t, c, "open {x}", p), 2)}))
	must(c.Isolate(ctx, coordinator.CommandRequest{Scope: "isolated", Policy: p, Note: note}))
	must(c.Disable(ctx, coordinator.CommandRequest{Scope: "disabled", Policy: p, Note: note}))
	must(other.Isolate(ctx, coordinator.CommandRequest{Scope: "elsewhere", Policy: p, Note: note}))
	var many []string
	for i := range 50 {
		s := fmt.Sprintf("svc-%02d/pkg.Service/Method", i)
		many = append(many, s)
		must(c.Record(ctx, coordinator.RecordRequest{Scope: s, Policy: p, Outcomes: failures(born(t, c, s, p), 2)}))
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

// controlOps are the operator's commands in an order where each changes
// the state.
var controlOps = []struct {
	name string
	do   func(*cbredis.Coordinator, context.Context, coordinator.CommandRequest) (coordinator.Result, error)
	note coordinator.Note
}{
	{"isolate", (*cbredis.Coordinator).Isolate, coordinator.Note{Reason: "durable"}},
	{"release", (*cbredis.Coordinator).Release, coordinator.Note{}},
	{"disable", (*cbredis.Coordinator).Disable, coordinator.Note{Reason: "durable"}},
	{"enable", (*cbredis.Coordinator).Enable, coordinator.Note{}},
}

// isolate isolates scope and returns what it reports, and how long it took.
func isolate(t *testing.T, c *cbredis.Coordinator, scope string) (coordinator.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := c.Isolate(t.Context(), coordinator.CommandRequest{Scope: scope, Policy: tripPolicy(), Note: coordinator.Note{Reason: "durable"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != coordinator.StateIsolated {
		t.Fatalf("Isolate(%q) = %+v; want isolated", scope, res)
	}
	return res, time.Since(start)
}

// streaming waits until the master streams writes to its replica: after a
// diskless sync it holds the stream back until the replica's first
// acknowledgement, which may come a second later, and until then WAIT
// counts no replica.
func streaming(t *testing.T, c *cbredis.Coordinator) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if res, _ := isolate(t, c, "redistest:streaming"); res.Replicas.Confirmed > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica confirmed a write for 10s")
		}
	}
}

// wantWaited checks that a command waited for its timeout, and no longer
// than the timeout and a margin for the round trips.
func wantWaited(t *testing.T, took, timeout time.Duration) {
	t.Helper()
	if took < timeout || took > timeout+2*time.Second {
		t.Errorf("the command took %v; want the replica timeout %v", took, timeout)
	}
}

// A command waits until the replica in sync has the change, and says so.
func TestControlConfirmedByReplica(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	c := cbredis.New(s.FailoverClient(t))
	streaming(t, c)
	onReplica := cbredis.New(s.Replica().Client(t))
	p := tripPolicy()
	for _, op := range controlOps {
		res, err := op.do(c, t.Context(), coordinator.CommandRequest{Scope: "s", Policy: p, Note: op.note})
		if err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if res.Transition == nil || res.Replicas != (coordinator.Replication{Wanted: 1, Confirmed: 1}) {
			t.Errorf("%s = %+v; want a transition confirmed by 1 replica of 1", op.name, res)
		}
		snap, err := onReplica.Snapshot(t.Context(), "s", p)
		if err != nil || snap.State != res.State || snap.Generation != res.Generation {
			t.Errorf("after %s, the replica reads %+v, %v; want %v in generation %d", op.name, snap, err, res.State, res.Generation)
		}
	}
}

// With the replica cut off, a command is in force on the master but says
// that no replica confirmed it, within the timeout; repeated once the
// replica is back, it is confirmed. The master reports no replica
// connected: it is its replication backlog that shows it had one.
func TestControlNotConfirmedWhenReplicationIsCut(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	const timeout = 300 * time.Millisecond
	c := cbredis.New(s.FailoverClient(t), cbredis.WithReplicaTimeout(timeout))
	s.CutReplication(t)
	res, took := isolate(t, c, "s")
	if res.Replicas != (coordinator.Replication{Wanted: 1, Confirmed: 0}) {
		t.Errorf("Isolate with replication cut: Replicas %+v; want 1 wanted, 0 confirmed", res.Replicas)
	}
	wantWaited(t, took, timeout)

	s.Replica().Resume()
	deadline := time.Now().Add(10 * time.Second)
	for res.Replicas.Confirmed != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Isolate after the replica resumed: Replicas %+v; want it confirmed by 1", res.Replicas)
		}
		res, _ = isolate(t, c, "s")
	}
}

// WithReplicas asks for more replicas than the master has: the command
// says how many of them confirmed.
func TestControlWithReplicasCountsThoseThatConfirmed(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	const timeout = 200 * time.Millisecond
	c := cbredis.New(s.FailoverClient(t), cbredis.WithReplicas(2), cbredis.WithReplicaTimeout(timeout))
	streaming(t, c)
	res, took := isolate(t, c, "s")
	if res.Replicas != (coordinator.Replication{Wanted: 2, Confirmed: 1}) {
		t.Errorf("Isolate wanting 2 replicas of 1: Replicas %+v; want 2 wanted, 1 confirmed", res.Replicas)
	}
	wantWaited(t, took, timeout)
}

// On a cluster, a command waits for the replica of the master that holds
// its scope, whichever master that is, and finds the new master once a
// failover has moved the scope's slot.
func TestControlConfirmedOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWithReplicas(t)
	rdb := cl.Client(t)
	const prefix = "durable:"
	c := cbredis.New(rdb, cbredis.WithPrefix(prefix))
	// The scopes land on every master. No need to wait for streaming: a
	// replica's first acknowledgement comes at most a second after its
	// sync, so within the default wait of a second.
	for i := range 12 {
		if res, _ := isolate(t, c, fmt.Sprintf("svc-%d", i)); res.Replicas != (coordinator.Replication{Wanted: 1, Confirmed: 1}) {
			t.Errorf("Isolate of svc-%d: Replicas %+v; want confirmed by 1 replica of 1", i, res.Replicas)
		}
	}

	var key string
	err := rdb.ForEachMaster(t.Context(), func(ctx context.Context, node *goredis.Client) error {
		keys, err := node.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			if node.HGet(ctx, k, "scope").Val() == "svc-0" {
				key = k
			}
		}
		return err
	})
	if err != nil || key == "" {
		t.Fatalf("the state key of svc-0: %q, %v", key, err)
	}
	cl.FailoverSlotOf(t, key)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.Release(t.Context(), coordinator.CommandRequest{Scope: "svc-0", Policy: tripPolicy(), Note: coordinator.Note{}})
		if err == nil {
			if res.Replicas != (coordinator.Replication{Wanted: 1, Confirmed: 1}) {
				t.Errorf("Release after the failover = %+v; want it confirmed by 1 replica of 1", res)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Release after the failover: %v", err)
		}
	}
}

func TestReplicaOptionsAreChecked(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, c := range []struct {
		opt  cbredis.Option
		want string
	}{
		{cbredis.WithReplicas(-1), "WithReplicas(-1)"},
		{cbredis.WithReplicaTimeout(-time.Second), "WithReplicaTimeout(-1s)"},
		{cbredis.WithReplicaTimeout(time.Microsecond), "WithReplicaTimeout(1µs): want at least 1ms"},
	} {
		func() {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, c.want) {
					t.Errorf("New with %s: panic %q; want one naming it", c.want, msg)
				}
			}()
			cbredis.New(rdb, c.opt)
		}()
	}
	cbredis.New(rdb, cbredis.WithReplicas(0), cbredis.WithReplicaTimeout(0)) // ignored: the defaults
}
