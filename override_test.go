package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// sharedCoordinators are the coordinators the shared-policy tests run on:
// memory, one redis-server, and the three-node Cluster.
func sharedCoordinators(t *testing.T) map[string]func(t *testing.T) coordinator.Coordinator {
	return map[string]func(t *testing.T) coordinator.Coordinator{
		"memory": func(*testing.T) coordinator.Coordinator { return memory.New() },
		"redis": func(t *testing.T) coordinator.Coordinator {
			return cbredis.New(redistest.Start(t).Client(t), cbredis.WithPrefix("shared:"))
		},
		"cluster": func(t *testing.T) coordinator.Coordinator {
			return cbredis.New(redistest.StartCluster(t).Client(t), cbredis.WithPrefix(fmt.Sprintf("shared-%d:", time.Now().UnixNano())))
		},
	}
}

func set(t *testing.T, ctl coordinator.Controller, target coordinator.Target, assignments ...string) coordinator.Overrides {
	t.Helper()
	o, err := coordinator.ParseOverride(assignments...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ctl.SetOverride(context.Background(), target, o, coordinator.Note{By: "test", Reason: t.Name()})
	if err != nil {
		t.Fatalf("SetOverride(%v, %v): %v", target, o, err)
	}
	return got
}

// inForceOf is what b runs scope on, once it has used the scope.
func inForceOf(b *Breaker, scope string) *inForce { return b.known.policyOf(scope) }

// TestSharedPolicyApplies: a Breaker runs a scope on its code's policy
// until an operator sets an override; then, without a redeploy, on the
// fleet default laid over the code's, and the scope's own override over
// that; a reset falls back. Each change arrives within a second: over the
// feed with the admission cache, and by answers and polling without it.
// The policy in force decides: an override of MinCalls trips the breaker
// where the code's policy would not, and Records say where their policy
// came from.
func TestSharedPolicyApplies(t *testing.T) {
	for name, newCoord := range sharedCoordinators(t) {
		for _, cache := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/cache=%v", name, cache), func(t *testing.T) {
				c := newCoord(t)
				ctl := c.(coordinator.Controller)
				code := coordinator.DefaultPolicy()
				code.MinCalls = 1000 // never trips in this test by itself
				opts := []Option{WithPolicy(code), WithRecordInterval(10 * time.Millisecond), WithCoordinatorTimeout(time.Second)}
				if !cache {
					opts = append(opts, WithAdmissionCache(0))
				}
				b := newBreaker(t, c, opts...)
				ctx := context.Background()
				scope, other := "shared/"+t.Name(), "shared/other/"+t.Name()
				call := func(scope string, fail error) error {
					tk, err := admitCall(b, ctx, &call{scope: scope, method: testMethod})
					if err != nil {
						return err
					}
					b.finish(ctx, tk, fail)
					return nil
				}
				for _, s := range []string{scope, other} {
					if err := call(s, nil); err != nil {
						t.Fatal(err)
					}
				}
				if got := inForceOf(b, scope); got.src != coordinator.SourceCode || got.p != code {
					t.Fatalf("before any override: %+v; want the code's policy", got)
				}

				// The fleet default reaches every scope.
				start := time.Now()
				set(t, ctl, coordinator.FleetDefault, "OpenFor=20s")
				waitPolicy(t, b, call, other, "the fleet default", func(f *inForce) bool {
					return f.src == coordinator.SourceFleet && f.p.OpenFor == 20*time.Second
				})
				t.Logf("fleet default applied after %v", time.Since(start))

				// The scope's own override, over the fleet default.
				start = time.Now()
				set(t, ctl, coordinator.ScopeTarget(scope), "MinCalls=4")
				want := code
				want.OpenFor, want.MinCalls = 20*time.Second, 4
				waitPolicy(t, b, call, scope, "the scope's override", func(f *inForce) bool {
					return f.src == coordinator.SourceScope && f.p == want
				})
				t.Logf("scope override applied after %v", time.Since(start))
				if got := inForceOf(b, other); got.src != coordinator.SourceFleet {
					t.Errorf("another scope: %+v; want the fleet default only", got)
				}

				// It decides: four failures trip the breaker.
				for range 4 {
					if err := call(scope, errFailed); err != nil {
						break
					}
				}
				eventually(t, "the breaker to open on the override's MinCalls", func() bool {
					return state(t, c, scope, want) == coordinator.StateOpen
				})
				snap, err := c.Snapshot(ctx, scope, want)
				if err != nil {
					t.Fatal(err)
				}
				if len(snap.Policies) == 0 || snap.Policies[0].Source != coordinator.SourceScope || snap.Policies[0].Policy != want {
					t.Errorf("Snapshot.Policies = %+v; want the override's policy first, from the scope override", snap.Policies)
				}

				// Resets fall back: to the fleet default, then the code's.
				if _, err := ctl.ResetOverride(ctx, coordinator.ScopeTarget(scope), coordinator.Note{}); err != nil {
					t.Fatal(err)
				}
				if _, err := ctl.ResetOverride(ctx, coordinator.FleetDefault, coordinator.Note{}); err != nil {
					t.Fatal(err)
				}
				waitPolicy(t, b, call, scope, "the code's policy after the resets", func(f *inForce) bool {
					return f.src == coordinator.SourceCode && f.p == code
				})
			})
		}
	}
}

var errFailed = errors.New("failed")

// waitPolicy calls scope (an answer tells the Breaker of a change; without
// the feed, only answers and polling do) until b runs it on a policy that
// ok accepts, for at most a second and a half: a change applies within a
// second, and without a feed the fleet default is polled every half
// second.
func waitPolicy(t *testing.T, b *Breaker, call func(string, error) error, scope, what string, ok func(*inForce) bool) {
	t.Helper()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for !ok(inForceOf(b, scope)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not apply within a second: %+v", what, inForceOf(b, scope))
		}
		call(scope, nil)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSharedPolicyLeavesOutWhatBreaksTheCode: an override checked against
// DefaultPolicy may not fit a Breaker's own policy (OpenFor past its
// MaxOpenFor), or stop fitting when the fleet default changes: that
// Breaker leaves it out, runs on what remains, and reports why, once per
// cause, to an error handler that may itself ask the Breaker.
func TestSharedPolicyLeavesOutWhatBreaksTheCode(t *testing.T) {
	var (
		mu       sync.Mutex
		reported []error
		b        atomic.Pointer[Breaker]
	)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if b := b.Load(); b != nil {
			b.Policy("fragile") // no lock of the Breaker's is held
		}
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) })) })
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range reported {
			if !errors.Is(err, coordinator.ErrInvalidPolicy) {
				t.Errorf("reported %v; want an invalid policy", err)
			}
		}
		return len(reported)
	}

	c := memory.New()
	code := coordinator.DefaultPolicy()
	code.MaxOpenFor = 10 * time.Second
	b.Store(newBreaker(t, c, WithPolicy(code)))
	ctx := context.Background()
	tk, err := admitCall(b.Load(), ctx, &call{scope: "fragile", method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	b.Load().finish(ctx, tk, nil)
	set(t, c, coordinator.ScopeTarget("fragile"), "OpenFor=30s") // fine under DefaultPolicy's 60s
	set(t, c, coordinator.FleetDefault, "MinCalls=7")
	want := code
	want.MinCalls = 7
	eventually(t, "the fleet default alone to apply", func() bool {
		f := inForceOf(b.Load(), "fragile")
		return f.p == want && f.src == coordinator.SourceFleet && f.layer.Version != 0
	})
	if n := count(); n != 1 {
		t.Errorf("%d reports; want one, the scope's override left out: %v", n, reported)
	}

	// A fleet default that makes the fitting override misfit: reported
	// once more, from the remaking of every scope's policy.
	set(t, c, coordinator.ScopeTarget("fragile"), "OpenFor=8s")
	eventually(t, "the scope's override to fit and apply", func() bool {
		if inForceOf(b.Load(), "fragile").src == coordinator.SourceScope {
			return true
		}
		// A call's answer carries the policy's version too: the change
		// is learned by the feed or by it, whichever comes first.
		if tk, err := admitCall(b.Load(), ctx, &call{scope: "fragile", method: testMethod}); err == nil {
			b.Load().finish(ctx, tk, nil)
		}
		time.Sleep(10 * time.Millisecond)
		return false
	})
	set(t, c, coordinator.FleetDefault, "MaxOpenFor=7s")
	want.MaxOpenFor = 7 * time.Second
	eventually(t, "the fleet default alone to apply again", func() bool {
		f := inForceOf(b.Load(), "fragile")
		return f.p == want && f.src == coordinator.SourceFleet
	})
	eventually(t, "the second report", func() bool { return count() == 2 })

}

// A feed whose Watch cannot tell policy changes (here a wrapper that hid
// coordinator.PolicyWatch) has the Breaker read the fleet default twice a
// second: said once, to the OpenTelemetry error handler, however often the
// feed connects.
func TestDeafFeedIsReportedOnce(t *testing.T) {
	reported := otelErrors(t)
	c := newTestCoordinator(t, memory.New()).whole()
	b := newBreaker(t, c, WithPolicy(tripPolicy()))
	const scope = "deaf"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	c.closeWatches()
	eventually(t, "the feed connects again", func() bool { return c.opened.Load() >= 2 && followed(b, scope) })
	var deaf []error
	for _, err := range reported() {
		if strings.Contains(err.Error(), "does not implement coordinator.PolicyWatch") {
			deaf = append(deaf, err)
		}
	}
	if len(deaf) != 1 {
		t.Errorf("reported %d times that the feed cannot tell policy changes, want once: %v", len(deaf), deaf)
	}
}
