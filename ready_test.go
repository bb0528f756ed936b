package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/freeport"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// reports collects what reaches otel.Handle until the test ends. otel's
// handler is the process's: tests that use it do not run in parallel.
type reports struct {
	mu   sync.Mutex
	errs []error
	at   []time.Time
}

func handleReports(t *testing.T) *reports {
	r := &reports{}
	old := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.at = append(r.at, time.Now())
		r.mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(old) })
	return r
}

// failing returns the reports of a failing coordinator so far, and when
// each came.
func (r *reports) failing() ([]error, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []error
	var at []time.Time
	for i, err := range r.errs {
		if strings.HasPrefix(err.Error(), "cbgrpc: coordinator failing") {
			out, at = append(out, err), append(at, r.at[i])
		}
	}
	return out, at
}

func (r *reports) count() int {
	errs, _ := r.failing()
	return len(errs)
}

// TestMisconfiguredRedisIsNamed: a wrong address, a wrong password, a
// missing ACL grant and a replica each fail Ready naming the cause, and
// within 2 s of the first call reach otel.Handle, once, with the
// underlying error; the error.type of the calls names the kind.
func TestMisconfiguredRedisIsNamed(t *testing.T) {
	s := redistest.Start(t)
	s.SetUser(t, "cbgrpc", "right", redistest.ACLGrant)
	s.SetUser(t, "noevalsha", "right", strings.Replace(redistest.ACLGrant, "+evalsha ", "", 1))
	replica := redistest.StartReplica(t, s)
	port, err := freeport.Loopback(false)
	if err != nil {
		t.Fatal(err)
	}
	nobody := fmt.Sprintf("127.0.0.1:%d", port)
	user := func(name, password string) *goredis.Options {
		return &goredis.Options{Addr: s.Addr(), Username: name, Password: password}
	}

	for _, tc := range []struct {
		name string
		opt  *goredis.Options
		kind string // the calls' error.type
		want []string
		opts []Option
	}{
		// At the default coordinator timeout, as a user's calls have it:
		// the calls time out, and the check says why.
		{"WrongAddress", &goredis.Options{Addr: nobody}, "timeout", []string{"cannot reach Redis at " + nobody, "connection refused"},
			[]Option{WithCoordinatorTimeout(DefaultCoordinatorTimeout)}},
		{"WrongPassword", user("cbgrpc", "wrong"), coordinator.KindAuth, []string{"refused the credentials", "WRONGPASS"}, nil},
		{"MissingGrant", user("noevalsha", "right"), coordinator.KindPermission, []string{"NOPERM", "evalsha", "docs/redis-acl.md"}, nil},
		{"Replica", &goredis.Options{Addr: replica.Addr()}, coordinator.KindReadOnly, []string{"read-only replica", "READONLY"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := handleReports(t)
			rdb := goredis.NewClient(tc.opt)
			defer rdb.Close()
			mt := newMetrics()
			b := newBreaker(t, cbredis.New(rdb), append(tc.opts, WithMeterProvider(mt.mp))...)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := b.Ready(ctx)
			if err == nil {
				t.Fatal("Ready: nil")
			}
			t.Logf("Ready: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Ready: %v\nwant it to say %q", err, w)
				}
			}

			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
			first := time.Now()
			for time.Since(first) < 2*time.Second && r.count() == 0 {
				client.EmptyCall(context.Background(), &testpb.Empty{})
			}
			for range 5 {
				client.EmptyCall(context.Background(), &testpb.Empty{})
			}
			// Close waits for the reports under way.
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			got, at := r.failing()
			if len(got) != 1 {
				t.Fatalf("reports of a failing coordinator: %q, want one", got)
			}
			report := got[0]
			t.Logf("otel.Handle after %v: %v", at[0].Sub(first), report)
			if d := at[0].Sub(first); d > 2*time.Second {
				t.Errorf("reported %v after the first call, want within 2s", d)
			}
			if !strings.HasPrefix(report.Error(), "cbgrpc: coordinator failing ("+tc.kind+")") {
				t.Errorf("report: %v\nwant it to start with the kind %q", report, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(report.Error(), w) {
					t.Errorf("report: %v\nwant it to say %q", report, w)
				}
			}
			if got := errorKind(report); got != tc.kind {
				t.Errorf("kind of the report = %q, want %q", got, tc.kind)
			}
			if n := mt.sum(t, "cbgrpc.coordinator.errors", semconv.ErrorTypeKey.String(tc.kind)); n == 0 {
				t.Errorf("no cbgrpc.coordinator.errors with error.type=%q", tc.kind)
			}
		})
	}
}

// TestCoordinatorFailureReportedAgainAfterItWorked: a kind is reported
// once while the coordinator fails, and again once it worked in between.
func TestCoordinatorFailureReportedAgainAfterItWorked(t *testing.T) {
	r := handleReports(t)
	tc := newTestCoordinator(t, memory.New())
	b := newBreaker(t, tc, WithCoordinatorBackoff(0))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	call := func() { client.EmptyCall(context.Background(), &testpb.Empty{}) }

	tc.set(modeFail)
	call()
	call()
	tc.set(modeOK)
	call()
	eventually(t, "the coordinator to work again", func() bool { return b.health.Trusted() })
	tc.set(modeFail)
	// A call the table answers asks nothing: the spell shows at the next
	// one that asks, or at the Record of the outcomes (once, in CI, the
	// single call after the failure had asked nothing yet).
	eventually(t, "the second spell reported", func() bool {
		call()
		got, _ := r.failing()
		return len(got) >= 2
	})
	if got, _ := r.failing(); len(got) != 2 {
		t.Errorf("reports: %q, want two: one per spell of failure", got)
	}
}

// TestReadyWithoutChecker: a coordinator with no Check is ready.
func TestReadyWithoutChecker(t *testing.T) {
	if err := newBreaker(t, memory.New()).Ready(context.Background()); err != nil {
		t.Errorf("Ready over memory: %v", err)
	}
}

// TestReadyOverWorkingRedis: Ready passes over a working Redis.
func TestReadyOverWorkingRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := newBreaker(t, cbredis.New(redistest.Start(t).Client(t))).Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

// TestReadyOfAPanickingCheck: Ready runs the check as every coordinator
// call runs: a panic is the coordinator's failure, not the process's; and
// once the Breaker is shut, Ready says so.
func TestReadyOfAPanickingCheck(t *testing.T) {
	c := newTestCoordinator(t, memory.New())
	c.checkHook = func(context.Context) error { panic("no client") }
	b := newBreaker(t, c.withCheck())
	if err := b.Ready(context.Background()); !errors.Is(err, errCoordinatorPanic) {
		t.Errorf("Ready over a panicking Check: %v; want it to wrap %v", err, errCoordinatorPanic)
	}
	b.Close()
	if err := b.Ready(context.Background()); !errors.Is(err, ErrShut) {
		t.Errorf("Ready after Close: %v; want ErrShut", err)
	}
}
