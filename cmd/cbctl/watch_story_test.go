package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestStoryTellsEachTransitionOnce: a transition the feed carries again,
// with its cause, and one a catch-up printed before the feed brought it
// are printed once; a transition the feed brings between two that a
// catch-up printed is printed all the same, and so is one of a generation
// below those printed, after a failover that lost the state.
func TestStoryTellsEachTransitionOnce(t *testing.T) {
	var out bytes.Buffer
	st := newStory(&env{stdout: &out}, nil, coordinator.Policy{})
	st.scopes["s"] = &told{}
	move := func(gen uint64, from, to coordinator.State, ms int64) coordinator.Transition {
		return coordinator.Transition{Scope: "s", From: from, To: to, Generation: gen, At: time.UnixMilli(1e12 + ms), Reason: "r"}
	}
	closed, open, halfOpen, isolated := coordinator.StateClosed, coordinator.StateOpen, coordinator.StateHalfOpen, coordinator.StateIsolated
	trip := move(10, closed, open, 0)
	probing := move(10, open, halfOpen, 50)
	recovered := move(11, halfOpen, closed, 60)
	isolation := move(12, closed, isolated, 70)
	longer := move(12, isolated, isolated, 80) // isolated again, with another end
	for _, tr := range []coordinator.Transition{trip, recovered} {
		if err := st.tell(tr, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range []coordinator.Transition{probing, probing, recovered, recovered, isolation, isolation, longer, longer} {
		if err := st.tell(tr, true); err != nil {
			t.Fatal(err)
		}
	}
	reborn := move(5, closed, open, 90)
	if err := st.tell(reborn, true); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tr := range []coordinator.Transition{trip, recovered, probing, isolation, longer, reborn} {
		want = append(want, transitionLine(tr))
	}
	if got := strings.TrimSpace(out.String()); got != strings.Join(want, "\n") {
		t.Errorf("printed:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
