package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// The ramp after a recovery (Policy.RampFor): while closed, every answer
// says what is left of the ramp that began when the breaker closed after
// being open, half-open or isolated, by the coordinator's clock, so that
// every replica, whenever it heard of the close, ramps in step.

func rampPolicy() coordinator.Policy {
	p := basePolicy()
	// A window longer than the ramp: a closed scope idle for a window is
	// forgotten, and its ramp with it.
	p.RampFor, p.ProbeSuccesses, p.Window = 10*time.Second, 1, time.Minute
	return p
}

// testRampLeftAfterRecovery: the closing Settle, then Admits and Records
// report the time left, down to 0 at RampFor; a trip and a second recovery
// start it again; a release after an isolation, and an isolation that
// ends by itself, are recoveries too.
func testRampLeftAfterRecovery(t *testing.T, f Factory) {
	h := newHarness(t, f, rampPolicy())
	h.halfOpen()
	gen := h.snapshot().Generation
	if d := h.admit("p"); d.Verdict != probe || d.RampLeft != 0 {
		t.Fatalf("probe while half-open: %+v; want a probe and no ramp", d)
	}
	res := h.settle("p", ok(gen))
	h.wantTransition("the probe that closes", res.Transition, halfOpen, closed, h.next(gen), "probes succeeded 1/1")
	if res.RampLeft != 10*time.Second {
		t.Errorf("the closing Settle: ramp left %v; want 10s", res.RampLeft)
	}
	closedGen := res.Generation
	h.advance(4 * time.Second)
	if d := h.admit("a"); d.Verdict != allow || d.RampLeft != 6*time.Second {
		t.Errorf("Admit 4s after the close: %+v; want allowed with 6s of ramp left", d)
	}
	if r := h.record(ok(closedGen)); r.RampLeft != 6*time.Second {
		t.Errorf("Record 4s after the close: %+v; want 6s of ramp left", r)
	}
	h.advance(6 * time.Second)
	if d := h.admit("b"); d.RampLeft != 0 {
		t.Errorf("Admit at the end of the ramp: %+v; want none left", d)
	}

	h.trip()
	if r := h.record(ok(closedGen)); r.RampLeft != 0 {
		t.Errorf("Record while open: %+v; want no ramp", r)
	}
	h.waitOpenPeriod()
	h.advance(time.Second)
	h.recover()
	if d := h.admit("c"); d.RampLeft != 10*time.Second {
		t.Errorf("Admit after the second recovery: %+v; want the ramp from its start", d)
	}

	if _, ok := h.c.(coordinator.Controller); !ok {
		return
	}
	h.advance(20 * time.Second)
	h.control("isolate", outage)
	h.advance(time.Second)
	if res := h.control("release", fixed); res.State != closed || res.RampLeft != 10*time.Second {
		t.Errorf("release after an isolation: %+v; want closed with the whole ramp left", res)
	}
	h.advance(20 * time.Second)
	h.control("isolate", coordinator.Note{By: "alice", Reason: "maintenance", For: time.Second})
	h.advance(3 * time.Second)
	d := h.admit("d")
	h.wantTransition("the first Admit after the isolation", d.Transition, isolated, closed, d.Generation, implement.IsolationEnded)
	if d.RampLeft != 10*time.Second {
		t.Errorf("Admit that ends an isolation 2s late: ramp left %v; want 10s, counted from now", d.RampLeft)
	}
}

// testNoRampWithoutRecovery: no ramp after a birth, after enable (a
// disabled breaker let every call through), or with RampFor 0.
func testNoRampWithoutRecovery(t *testing.T, f Factory) {
	h := newHarness(t, f, rampPolicy())
	if d := h.admit("born"); d.RampLeft != 0 {
		t.Errorf("Admit that gives birth: %+v; want no ramp", d)
	}
	off := newHarness(t, f, basePolicy()).on("off")
	off.halfOpen()
	if gen := off.recover(); off.record(ok(gen)).RampLeft != 0 {
		t.Errorf("recovery with RampFor 0: a ramp left")
	}
	if _, ok := h.c.(coordinator.Controller); !ok {
		return
	}
	h.control("disable", outage)
	if res := h.control("enable", fixed); res.State != closed || res.RampLeft != 0 {
		t.Errorf("enable: %+v; want closed with no ramp", res)
	}
	h.control("disable", outage)
	if res := h.control("release", fixed); res.State != closed || res.RampLeft != 0 {
		t.Errorf("release of a disabled breaker: %+v; want closed with no ramp", res)
	}
}
