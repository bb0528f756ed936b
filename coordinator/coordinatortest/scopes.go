package coordinatortest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Rule 7 of the contract (docs/architecture.md): scopes are opaque strings, and two scopes never
// share anything; the empty string is no scope.

// opaqueScopes are scope names that a coordinator might mangle or confuse:
// blank, control bytes, key separators, Redis Cluster hash tags, invalid
// UTF-8, and two 1 MiB names that differ in their last byte.
func opaqueScopes() []string {
	big := strings.Repeat("s", 1<<20)
	return []string{
		" ", "\x00", "\n", "{", "}", "{}", "{a}", "a", "a}", "{a", "a|b", "a|", "|a", "a:state", "a\x00state",
		"line\nbreak\r\n", "tab\there", "ünïcødé/服务/🚦", "\xff\xfe not utf-8",
		big, big[:len(big)-1] + "t",
	}
}

// testScopesAreOpaque trips the scopes one by one; after each trip, every
// scope tripped so far reads open in its own generation and every other
// one reads not born.
func testScopesAreOpaque(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	scopes := opaqueScopes()
	tripped := make([]uint64, len(scopes))
	for i, scope := range scopes {
		hs := h.on(scope)
		gen := hs.closedGen()
		tripped[i] = hs.wantTrip("tripping scope "+trim(scope), gen, "failures 4/4 >= 50%", fail(gen), fail(gen), fail(gen), fail(gen))
		for j, other := range scopes {
			s := h.on(other).snapshot()
			want := coordinator.Snapshot{Scope: other}
			if j <= i {
				want = coordinator.Snapshot{Scope: other, State: open, Generation: tripped[j]}
			}
			if s.Scope != want.Scope || s.State != want.State || s.Generation != want.Generation {
				t.Fatalf("after tripping scopes 0..%d (last %s): snapshot of scope %d (%s) is %s in %v, generation %d; want itself in %v, generation %d",
					i, trim(scope), j, trim(other), trim(s.Scope), s.State, s.Generation, want.State, want.Generation)
			}
		}
	}
}

// testEmptyScopeIsRefused: no call has the empty scope (a Breaker leaves
// such a call unprotected), so every operation that would store state for
// it is refused with ErrInvalidScope, and nothing is stored: Snapshot
// reads it as not born.
func testEmptyScopeIsRefused(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy()).on("")
	ctx, p, n := t.Context(), h.p, coordinator.Note{By: "alice", Reason: "a typo"}
	type op struct {
		name string
		do   func() error
	}
	ops := []op{
		{"Admit", func() error {
			_, err := h.c.Admit(ctx, coordinator.AdmitRequest{Scope: "", Policy: p, Claim: "claim"})
			return err
		}},
		{"Record", func() error {
			_, err := h.c.Record(ctx, coordinator.RecordRequest{Scope: "", Policy: p, Outcomes: []coordinator.Outcome{{Generation: 1, Failure: true}}})
			return err
		}},
		{"Settle", func() error {
			_, err := h.c.Settle(ctx, coordinator.SettleRequest{Scope: "", Policy: p, Claim: "claim", Outcome: coordinator.Outcome{Generation: 1}})
			return err
		}},
	}
	if c, ok := h.c.(coordinator.Controller); ok {
		ops = append(ops,
			op{"Isolate", func() error {
				_, err := c.Isolate(ctx, coordinator.CommandRequest{Scope: "", Policy: p, Note: n})
				return err
			}},
			op{"Release", func() error {
				_, err := c.Release(ctx, coordinator.CommandRequest{Scope: "", Policy: p, Note: n})
				return err
			}},
			op{"Disable", func() error {
				_, err := c.Disable(ctx, coordinator.CommandRequest{Scope: "", Policy: p, Note: n})
				return err
			}},
			op{"Enable", func() error {
				_, err := c.Enable(ctx, coordinator.CommandRequest{Scope: "", Policy: p, Note: n})
				return err
			}},
			op{"SetOverride", func() error {
				_, err := c.SetOverride(ctx, coordinator.ScopeTarget(""), coordinator.Override{"MinCalls": "5"}, n)
				return err
			}},
			op{"ResetOverride", func() error { _, err := c.ResetOverride(ctx, coordinator.ScopeTarget(""), n); return err }})
	}
	if c, ok := h.c.(coordinator.Pusher); ok {
		ops = append(ops, op{"Push", func() error {
			_, err := c.Push(ctx, coordinator.PushRequest{Scope: "", Policy: p, Generation: 1, Period: time.Second, Reason: "overloaded"})
			return err
		}})
	}
	for _, o := range ops {
		if err := o.do(); !errors.Is(err, coordinator.ErrInvalidScope) {
			t.Errorf("%s of the empty scope = %v; want ErrInvalidScope", o.name, err)
		}
	}
	h.wantNotBorn("after the refusals")
	if c, ok := h.c.(coordinator.Controller); ok {
		if o, err := c.Overrides(ctx, coordinator.ScopeTarget("")); err != nil || o.Scope.Version != 0 {
			t.Errorf("Overrides of the empty scope = %+v, %v; want none stored", o, err)
		}
	}
}

// trim quotes a scope for a message, shortening 1 MiB names.
func trim(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", s[:20], len(s))
	}
	return strconv.Quote(s)
}

func testDifferentScopesNeverInterfere(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	a, b := h.on(h.scope+"/{x}"), h.on(h.scope+"/x")
	ga, gb := a.closedGen(), b.closedGen()
	a.record(fail(ga), fail(ga), fail(ga))
	b.record(fail(gb), fail(gb), fail(gb))
	for _, hs := range []*harness{a, b} {
		if s := hs.snapshot(); s.Calls != 3 || s.State != closed {
			t.Errorf("snapshot %+v; want closed with 3 calls: windows are per scope", s)
		}
	}
	ga = a.wantTrip("a's fourth call", ga, "failures 3/4 >= 50%", ok(ga))
	b.wantState("after a trips", closed, gb)

	h.advance(50 * time.Millisecond)
	gb = b.wantTrip("b's fourth call", gb, "failures 4/4 >= 50%", fail(gb))
	h.advance(100 * time.Millisecond)
	for _, c := range []string{"1", "2"} {
		a.wantDecision("a's probe "+c, a.admit("p"+c), probe, halfOpen, ga)
		b.wantDecision("b's probe "+c, b.admit("p"+c), probe, halfOpen, gb)
	}
	a.wantDecision("a's third probe", a.admit("p3"), reject, halfOpen, ga)
	a.wantTransition("a's failed probe", a.settle("p1", fail(ga)).Transition, halfOpen, open, a.next(ga), "probe failed")
	if s := b.wantState("after a reopens", halfOpen, gb); s.ProbesInFlight != 2 {
		t.Errorf("snapshot of b %+v; want its 2 probes in flight", s)
	}
	b.wantResult("b's probe with the same claim as a's", b.settle("p1", ok(gb)), halfOpen, gb, 0)
}
