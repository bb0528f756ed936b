package faults

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// applyWithin is how soon every Breaker must run on an override once it
// is set (the shared policy's promise).
const applyWithin = time.Second

// TestPolicyReachesTheFleet: four replica processes, each its own Breaker
// over one Redis (then the three-node Cluster), call a scope on their
// code's policy. An operator runs `cbctl policy set` for the scope, then
// `cbctl policy set --default`, then resets both. After each command every
// replica runs on what it makes within a second, counted from the moment
// the command started to the moment the replica reported the new policy
// in force (replicas look every millisecond and report a change at once).
func TestPolicyReachesTheFleet(t *testing.T) {
	cbctl := buildCbctl(t)
	t.Run("Redis", func(t *testing.T) {
		srv := redistest.Start(t)
		policyReachesTheFleet(t, cbfleet.Config{Redis: srv.Addr()}, cbctl, "--addr", srv.Addr())
	})
	t.Run("Cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		policyReachesTheFleet(t, cbfleet.Config{Cluster: c.Addrs()}, cbctl, "--cluster", "--addr", strings.Join(c.Addrs(), ","))
	})
}

var cbctlBin struct {
	once sync.Once
	path string
	err  error
}

// buildCbctl builds the operator's CLI once for the package's tests.
func buildCbctl(t *testing.T) string {
	t.Helper()
	cbctlBin.once.Do(func() {
		cbctlBin.path = filepath.Join(filepath.Dir(bin), "cbctl")
		out, err := exec.Command("go", "build", "-o", cbctlBin.path, "github.com/cbgrpc/cbgrpc/cmd/cbctl").CombinedOutput()
		if err != nil {
			cbctlBin.err = err
			t.Logf("go build cbctl: %s", out)
		}
	})
	if cbctlBin.err != nil {
		t.Fatalf("go build cbctl: %v", cbctlBin.err)
	}
	return cbctlBin.path
}

func policyReachesTheFleet(t *testing.T, cfg cbfleet.Config, cbctl string, redisFlags ...string) {
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

	s := scope(srv.Addr(), cbfleet.EmptyCall)
	scoped, fleetDefault := code, code
	scoped.MinCalls = 30
	both := scoped
	both.OpenFor, fleetDefault.OpenFor = 30*time.Second, 30*time.Second
	for _, step := range []struct {
		args []string
		want coordinator.Policy
		src  coordinator.PolicySource
	}{
		{[]string{"set", s, "min_calls=30"}, scoped, coordinator.SourceScope},
		{[]string{"set", "--default", "open_for=30s"}, both, coordinator.SourceScope},
		{[]string{"reset", s}, fleetDefault, coordinator.SourceFleet},
		{[]string{"reset", "--default"}, code, coordinator.SourceCode},
	} {
		args := append(append(append([]string{}, redisFlags...), "policy"), step.args...)
		args = append(args, "--by", "test", "--reason", "propagation")
		what := "cbctl policy " + strings.Join(step.args, " ")
		start := time.Now()
		if out, err := exec.Command(cbctl, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		returned := time.Since(start)
		var took []time.Duration
		for _, r := range fleet {
			rep := r.WaitFor(t, "the new policy", settle, in(step.want, step.src))
			took = append(took, time.UnixMilli(rep.At).Sub(start.Truncate(time.Millisecond)))
		}
		slices.Sort(took)
		t.Logf("%s: the command returned after %v; every replica applied it within %v (per replica %v)", what,
			returned.Round(100*time.Microsecond), took[len(took)-1], took)
		if took[len(took)-1] > applyWithin {
			t.Errorf("%s: the last replica applied it %v after the command began; want within %v", what, took[len(took)-1], applyWithin)
		}
	}
	fleet.Quit(quitTimeout)
}
