package coordinatortest

import (
	"context"
	"errors"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Listing ([coordinator.Lister]): every born scope, sorted, each as its
// snapshot says; a scope whose stored state is corrupt is listed apart
// from the others, which still show. Not part of [Run]: listing is an
// operator's tool, which a Breaker's grant on the store (a Redis ACL) may
// leave out.

// listed lists the scopes of h's coordinator, failing the test on an
// error, or skips it when the coordinator cannot list.
func (h *harness) listed() []coordinator.Snapshot {
	h.t.Helper()
	l, ok := h.c.(coordinator.Lister)
	if !ok {
		h.t.Skipf("%T is not a coordinator.Lister", h.c)
	}
	list, err := l.List(context.Background(), h.p)
	if err != nil {
		h.t.Fatalf("List: %v", err)
	}
	return list
}

// born makes h's scope born, with a Record counted, and returns its snapshot.
func (h *harness) born() coordinator.Snapshot {
	h.t.Helper()
	h.record(ok(h.closedGen()))
	return h.snapshot()
}

// wantListed checks that list holds want's scopes in want's order, each
// read as its snapshot and none corrupt.
func wantListed(t *testing.T, list, want []coordinator.Snapshot) {
	t.Helper()
	if len(list) != len(want) {
		t.Fatalf("List holds %d scopes; want %d", len(list), len(want))
	}
	for i, s := range list {
		w := want[i]
		if s.Scope != w.Scope || s.State != w.State || s.Generation != w.Generation || s.Calls != w.Calls || s.Corrupt != nil {
			t.Errorf("List[%d] = %q %v gen %d calls %d corrupt %v; want %q %v gen %d calls %d, not corrupt",
				i, s.Scope, s.State, s.Generation, s.Calls, s.Corrupt, w.Scope, w.State, w.Generation, w.Calls)
		}
	}
}

// ListHoldsEveryBornScope checks, on the coordinators f makes, that born
// scopes, closed or open, are listed by scope, each as its snapshot
// reads, and that a scope forgotten is not.
func ListHoldsEveryBornScope(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	forgotten := h.on("a forgotten")
	forgotten.record(ok(forgotten.closedGen()))
	h.forget(h.now())
	c, a := h.on("c").born(), h.on("a").born()
	b := h.on("b")
	b.trip()
	wantListed(t, h.listed(), []coordinator.Snapshot{a, b.snapshot(), c})
}

// ListWithCorruptScope checks, on the coordinators f makes, that one
// scope's corrupt state does not blind a listing: corrupt makes the
// stored state of scope on sut unusable (junk in its keys, which the
// in-process coordinator cannot hold), and List then still lists every
// other scope as before, and that one in its place with only Scope and
// Corrupt set, Corrupt wrapping [coordinator.ErrCorruptState].
func ListWithCorruptScope(t *testing.T, f Factory, corrupt func(t *testing.T, sut coordinator.Coordinator, scope string)) {
	h := newHarness(t, f, basePolicy())
	a, bad, c := h.on("a").born(), h.on("b"), h.on("c").born()
	bad.born()
	corrupt(t, h.c, bad.scope)
	list := h.listed()
	if len(list) != 3 {
		t.Fatalf("List over a corrupt scope holds %d scopes; want all 3", len(list))
	}
	wantListed(t, []coordinator.Snapshot{list[0], list[2]}, []coordinator.Snapshot{a, c})
	if s := list[1]; s.Scope != bad.scope || !errors.Is(s.Corrupt, coordinator.ErrCorruptState) {
		t.Errorf("List[1] = %q corrupt %v; want %q, corrupt with ErrCorruptState", s.Scope, s.Corrupt, bad.scope)
	} else if s.State != closed || s.Generation != 0 || s.Calls != 0 {
		t.Errorf("List: the corrupt scope reads %v gen %d calls %d; want nothing but Scope and Corrupt", s.State, s.Generation, s.Calls)
	}
}
