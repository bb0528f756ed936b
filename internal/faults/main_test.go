package faults

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
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

// replicas returns n configs like base, numbered from 1. Their callers
// pause a millisecond after a rejection unless base says otherwise:
// callers spinning on rejections would starve Redis and the other
// replicas of the two cores CI has.
func replicas(n int, base cbfleet.Config) []cbfleet.Config {
	if base.RejectPause == 0 {
		base.RejectPause = time.Millisecond
	}
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

// scope is the breaker scope of a TestService method called on target,
// as replicas name it (cbgrpc.ScopeByMethod, the default).
func scope(target, method string) string {
	return cbgrpc.ScopeByMethod(context.Background(), target, "/grpc.testing.TestService/"+method)
}

// snapshot reads a scope's breaker from Redis, as an operator would.
func snapshot(t *testing.T, rdb goredis.UniversalClient, scope string, p coordinator.Policy) coordinator.Snapshot {
	t.Helper()
	s, err := cbredis.New(rdb).Snapshot(context.Background(), scope, p)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// sum adds up f over reports.
func sum(reps []cbfleet.Report, f func(cbfleet.Report) int64) int64 {
	var n int64
	for _, r := range reps {
		n += f(r)
	}
	return n
}

// maxOf is the largest f over reports.
func maxOf(reps []cbfleet.Report, f func(cbfleet.Report) int64) int64 {
	var n int64
	for _, r := range reps {
		n = max(n, f(r))
	}
	return n
}

// method reads one method's counts of a report, zero if it made none.
func method(r cbfleet.Report, name string) cbfleet.MethodCount {
	if m := r.Methods[name]; m != nil {
		return *m
	}
	return cbfleet.MethodCount{}
}
