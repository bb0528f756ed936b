package health

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var errDown = errors.New("connection refused")

func TestAnAdmissionErrorStartsTheBackoff(t *testing.T) {
	h := New(20 * time.Millisecond)
	if !h.Trusted() || !h.MayAsk() || h.InBackoff() || h.Down() {
		t.Fatal("a new status is not a working coordinator")
	}
	h.Failed(errDown, true)
	if h.Trusted() || h.MayAsk() || !h.InBackoff() || !h.Down() || h.BackoffLeft() <= 0 {
		t.Fatalf("after an admission's error: trusted %v, may ask %v, in back-off %v, down %v, left %v; want a back-off",
			h.Trusted(), h.MayAsk(), h.InBackoff(), h.Down(), h.BackoffLeft())
	}
	for h.InBackoff() {
		time.Sleep(time.Millisecond)
	}
	// After the back-off, one call at a time asks.
	if !h.MayAsk() || h.MayAsk() {
		t.Fatal("after the back-off, want exactly one call to ask")
	}
	h.Abandoned() // its caller gave up: another may try
	if !h.MayAsk() {
		t.Fatal("after an abandoned call, another may not ask")
	}
	h.Succeeded()
	if !h.Trusted() || !h.MayAsk() || h.Down() || h.BackoffLeft() != 0 {
		t.Fatal("an answer did not end the back-off")
	}
}

func TestARecordErrorStartsNoBackoff(t *testing.T) {
	h := New(time.Hour)
	h.Failed(errDown, false)
	if h.Trusted() {
		t.Error("a Record's error left the table trusted")
	}
	if !h.MayAsk() || h.InBackoff() || h.Down() {
		t.Error("a Record's error started a back-off")
	}
}

func TestOneScopesCorruptStateIsNoFailure(t *testing.T) {
	h := New(time.Hour)
	h.Failed(fmt.Errorf("scope s: %w", coordinator.ErrCorruptState), true)
	if !h.Trusted() || !h.MayAsk() || h.Down() {
		t.Error("one scope's unusable data counted as the coordinator failing")
	}
}

func TestEachKindIsComplainedOfOnceUntilItWorks(t *testing.T) {
	h := New(time.Second)
	if !h.Complain("timeout") || h.Complain("timeout") || !h.Complain("unreachable") {
		t.Fatal("want the first of each kind reported, and only the first")
	}
	h.Succeeded() // while trusted: nothing failed, nothing forgotten
	if h.Complain("timeout") {
		t.Error("an answer while the coordinator was trusted forgot the complaints")
	}
	h.Failed(errDown, false)
	h.Succeeded()
	if !h.Complain("timeout") {
		t.Error("once the coordinator worked again, the next timeout was not reported")
	}
}
