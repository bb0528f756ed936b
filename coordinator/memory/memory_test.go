package memory_test

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

func newMemory(t *testing.T, clock func() time.Time) coordinator.Coordinator {
	return memory.New(memory.WithClock(clock))
}

// onFakeClock returns an in-process coordinator reading the fake clock it
// returns too.
func onFakeClock() (*memory.Coordinator, *coordinatortest.Clock) {
	clk := coordinatortest.NewClock()
	return memory.New(memory.WithClock(clk.Now)), clk
}

func TestConformance(t *testing.T) {
	coordinatortest.Run(t, newMemory)
}

func TestListHoldsEveryBornScope(t *testing.T) {
	coordinatortest.ListHoldsEveryBornScope(t, newMemory)
}
