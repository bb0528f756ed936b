package cbgrpc

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// TestBreakerSnapshotSaysWhyItTripped: after a trip, the Breaker's
// Snapshot and List show the open scope and the reason and counts of its
// trip; looking changes nothing; a coordinator that cannot list says so.
func TestBreakerSnapshotSaysWhyItTripped(t *testing.T) {
	p := tripPolicy()
	c := memory.New()
	b := newBreaker(t, c, WithPolicy(p))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	ctx := context.Background()
	svc.setErr(status.Error(codes.Unavailable, "down"))
	eventually(t, "the breaker to open", func() bool {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		return errors.Is(err, ErrOpen)
	})
	scopes := b.known.all()
	if len(scopes) != 1 {
		t.Fatalf("scopes known: %q; want one", scopes)
	}
	s, err := b.Snapshot(ctx, scopes[0])
	if err != nil {
		t.Fatal(err)
	}
	if s.State != coordinator.StateOpen || s.LastTrip.Generation != s.Generation || s.LastTrip.Failures != 1 ||
		!strings.Contains(s.LastTrip.Reason, "consecutive failures") || s.LastTrip.At.IsZero() {
		t.Errorf("Snapshot after the trip: %+v; want open, its trip's reason, time and counts", s)
	}
	again, err := b.Snapshot(ctx, scopes[0])
	if err != nil || !reflect.DeepEqual(again, s) {
		t.Errorf("a second Snapshot: %+v, %v; want the same, looking changes nothing", again, err)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], s) {
		t.Errorf("List = %+v, %v; want the one snapshot", list, err)
	}

	other := newBreaker(t, newTestCoordinator(t, memory.New()))
	if _, err := other.List(ctx); !errors.Is(err, ErrNoLister) {
		t.Errorf("List over a coordinator that cannot list: %v; want ErrNoLister", err)
	}
	if s, err := other.Snapshot(ctx, "never/used"); err != nil || s.Generation != 0 {
		t.Errorf("Snapshot of a scope never used: %+v, %v; want generation 0", s, err)
	}
}
