package coordinatortest

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The optional start-up check: a coordinator that can serve says so.

// testCheckPassesWhenServing checks that a working coordinator's Check
// returns nil; one that is no [coordinator.Checker] skips it.
func testCheckPassesWhenServing(t *testing.T, f Factory) {
	c := f(t, NewClock().Now)
	ch, ok := c.(coordinator.Checker)
	if !ok {
		t.Skipf("%T is no coordinator.Checker", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ch.Check(ctx); err != nil {
		t.Fatalf("Check of a working coordinator: %v", err)
	}
}
