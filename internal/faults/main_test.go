package faults

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
)

// bin is the replica program, built once for every test.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cbfleet")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = fleettest.Build(dir)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fleetPolicy trips on half of at least minCalls failing, and stays open
// for a minute: long enough that no test sees a probe it did not ask for.
func fleetPolicy(minCalls int) coordinator.Policy {
	return coordinator.Policy{
		Window:         10 * time.Second,
		Buckets:        10,
		MinCalls:       minCalls,
		FailureRatio:   0.5,
		OpenFor:        time.Minute,
		Probes:         1,
		ProbeLease:     10 * time.Second,
		ProbeSuccesses: 1,
	}
}

// replicas returns n configs like base, numbered from 1.
func replicas(n int, base cbfleet.Config) []cbfleet.Config {
	cfgs := make([]cbfleet.Config, n)
	for i := range cfgs {
		cfgs[i] = base
		cfgs[i].ID = i + 1
	}
	return cfgs
}

const (
	// settle bounds how long a fleet may take to reach a state the test
	// waits for; on 2 loaded cores under -race it is seconds, not ms.
	settle = 30 * time.Second
	// quitTimeout bounds a replica's Close and exit: Close itself gives up
	// after 10s.
	quitTimeout = 15 * time.Second
)
