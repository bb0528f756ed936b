package faults

import (
	"context"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// applyWithin is how soon every Breaker must run on an override once it
// is set (the shared policy's promise).
const applyWithin = time.Second

// TestPolicyReachesTheFleet: four replica processes, each its own Breaker
// over one Redis (then the three-node Cluster), call a scope on their
// code's policy. An operator sets an override of the scope, then a fleet
// default, then resets both, as `cbctl policy` does, through the
// coordinator's Controller. After each change every replica runs on what
// it makes within a second, from the moment the operator's command began
// to the moment the replica reported the new policy in force (replicas
// look every millisecond and report a change at once).
func TestPolicyReachesTheFleet(t *testing.T) {
	t.Run("Redis", func(t *testing.T) {
		srv := redistest.Start(t)
		policyReachesTheFleet(t, cbfleet.Config{Redis: srv.Addr()}, srv.Client(t))
	})
	t.Run("Cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		policyReachesTheFleet(t, cbfleet.Config{Cluster: c.Addrs()}, c.Client(t))
	})
}

func policyReachesTheFleet(t *testing.T, cfg cbfleet.Config, rdb goredis.UniversalClient) {
	srv := fleettest.NewServer(t)
	cfg.Target = srv.Addr()
	cfg.Concurrency = 1
	cfg.RejectPause = time.Millisecond
	code := fleetPolicy(20)
	cfg.Policy = code
	fleet := fleettest.Start(t, bin, replicas(4, cfg)...)
	fleet.Send("run")
	in := func(p coordinator.Policy, src coordinator.PolicySource) func(cbfleet.Report) bool {
		want := p.Fingerprint() + " " + src.String()
		return func(r cbfleet.Report) bool { return r.Calls > 0 && r.Policies[cbfleet.EmptyCall] == want }
	}
	fleet.WaitAll(t, "every replica calling on its code's policy", settle, in(code, coordinator.SourceCode))

	ctl := cbredis.New(rdb)
	s := scope(srv.Addr(), cbfleet.EmptyCall)
	note := coordinator.Note{By: "test", Reason: "propagation"}
	scoped, fleetDefault := code, code
	scoped.MinCalls = 30
	both := scoped
	both.OpenFor, fleetDefault.OpenFor = 30*time.Second, 30*time.Second
	for _, step := range []struct {
		what   string
		change func(ctx context.Context) error
		want   coordinator.Policy
		src    coordinator.PolicySource
	}{
		{"set the scope's override", func(ctx context.Context) error {
			_, err := ctl.SetOverride(ctx, coordinator.ScopeTarget(s), coordinator.Override{"MinCalls": "30"}, note)
			return err
		}, scoped, coordinator.SourceScope},
		{"set the fleet default", func(ctx context.Context) error {
			_, err := ctl.SetOverride(ctx, coordinator.FleetDefault, coordinator.Override{"OpenFor": "30s"}, note)
			return err
		}, both, coordinator.SourceScope},
		{"reset the scope's override", func(ctx context.Context) error {
			_, err := ctl.ResetOverride(ctx, coordinator.ScopeTarget(s), note)
			return err
		}, fleetDefault, coordinator.SourceFleet},
		{"reset the fleet default", func(ctx context.Context) error {
			_, err := ctl.ResetOverride(ctx, coordinator.FleetDefault, note)
			return err
		}, code, coordinator.SourceCode},
	} {
		start := time.Now()
		if err := step.change(t.Context()); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		returned := time.Since(start)
		var took []time.Duration
		for _, r := range fleet {
			rep := r.WaitFor(t, "the new policy", settle, in(step.want, step.src))
			took = append(took, time.UnixMilli(rep.At).Sub(start.Truncate(time.Millisecond)))
		}
		slices.Sort(took)
		t.Logf("%s: the command returned after %v; every replica applied it within %v (per replica %v)", step.what,
			returned.Round(100*time.Microsecond), took[len(took)-1], took)
		if took[len(took)-1] > applyWithin {
			t.Errorf("%s: the last replica applied it %v after the command began; want within %v", step.what, took[len(took)-1], applyWithin)
		}
	}
	fleet.Quit(quitTimeout)
}
