package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// loadedTimeout is the coordinator timeout of the tests' runs: the
// default 50 ms is a hundred round trips to a Redis on a calm machine, but
// a test machine running two suites at once took longer, and the breaker,
// rightly dropping the outcomes it could not send, never tripped.
const loadedTimeout = time.Second

// requireRedis skips the test when redis-server is not installed, and
// fails it under CI=true: CI must never pass by skipping the real thing.
func requireRedis(t *testing.T) {
	t.Helper()
	redistest.Tool(t, "redis-server")
}

// checkRun runs the example with cfg and checks that its transcript shows
// the trip, the rejections, the recovery and a scrape of /metrics with the
// breaker's series in it.
func checkRun(t *testing.T, cfg config) string {
	t.Helper()
	var out bytes.Buffer
	if err := runNoLeak(t, context.Background(), &out, cfg); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	text := out.String()
	for _, want := range []string{
		"-- the inventory database goes down for 1.5s\n",
		"   ** inventory: closed -> open (",
		"rejected by the breaker, not sent (open, retry after ",
		"-- the inventory database is back\n",
		"   ** inventory: half-open -> closed (",
		`cbgrpc_transitions_total{cbgrpc_caused="true",cbgrpc_outlier="false",cbgrpc_state_from="closed",cbgrpc_state_to="open"} 1`,
		`cbgrpc_transitions_total{cbgrpc_caused="true",cbgrpc_outlier="false",cbgrpc_state_from="half-open",cbgrpc_state_to="closed"} 1`,
		`cbgrpc_decisions_total{cbgrpc_decided_by="cache",cbgrpc_verdict="reject",`,
		`cbgrpc_state{cbgrpc_state="closed"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the example does not print %q:\n%s", want, text)
		}
	}
	if trip, back := strings.Index(text, "closed -> open"), strings.Index(text, "half-open -> closed"); trip > back {
		t.Errorf("the example prints the recovery before the trip:\n%s", text)
	}
	return text
}

// runNoLeak runs the example and checks that its goroutines ended with it;
// those of Close's own waiting are given a moment.
func runNoLeak(t *testing.T, ctx context.Context, w io.Writer, cfg config) error {
	t.Helper()
	before := runtime.NumGoroutine()
	err := run(ctx, w, cfg)
	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before || time.Now().After(deadline) {
			break
		}
	}
	if after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before the run, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	return err
}

// checkRedisStopped checks that the transcript says the example started a
// redis-server and stopped it, and that it no longer listens.
func checkRedisStopped(t *testing.T, text string) {
	t.Helper()
	m := started.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the example does not say it started a redis-server:\n%s", text)
	}
	if !strings.HasSuffix(text, "Stopped the redis-server on "+m[1]+".\n") {
		t.Errorf("the example does not end saying it stopped the redis-server on %s:\n%s", m[1], text)
	}
	if conn, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after the example ended", m[1])
	}
}

var started = regexp.MustCompile(`No -redis given: started redis-server on (127\.0\.0\.1:\d+) \(pid \d+\)\.\n`)

// Without -redis it starts a redis-server of its own, and stops it at the
// end.
func TestProductionStartsItsOwnRedis(t *testing.T) {
	requireRedis(t)
	checkRedisStopped(t, checkRun(t, config{metrics: "127.0.0.1:0", timeout: loadedTimeout}))
}

// cancelOn cancels a context once the transcript shows want.
type cancelOn struct {
	bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.Buffer.Write(p)
	if strings.Contains(c.String(), c.want) {
		c.cancel()
	}
	return n, err
}

// Interrupted while the breaker is open (main cancels run's context on
// Ctrl-C), it shuts down as at the end: the redis-server it started
// stopped, no goroutine left.
func TestProductionInterruptStopsItsRedis(t *testing.T) {
	requireRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{want: "rejected by the breaker", cancel: cancel}
	if err := runNoLeak(t, ctx, out, config{metrics: "127.0.0.1:0", timeout: loadedTimeout}); !errors.Is(err, context.Canceled) {
		t.Errorf("run interrupted: %v; want context.Canceled\n%s", err, out)
	}
	checkRedisStopped(t, out.String())
}

// With -redis it keeps the breaker's state in that Redis, under a prefix
// of its own, and starts no redis-server.
func TestProductionUsesGivenRedis(t *testing.T) {
	srv := redistest.Start(t)
	text := checkRun(t, config{redis: srv.Addr(), metrics: "127.0.0.1:0", timeout: loadedTimeout})
	if strings.Contains(text, "redis-server") {
		t.Errorf("with -redis the example mentions a redis-server of its own:\n%s", text)
	}
	rdb := srv.Client(t)
	ours, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	all, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ours) == 0 || int64(len(ours)) != all {
		t.Errorf("%d keys under %q in the Redis given with -redis, %d in all; want some, and no other\n%s", len(ours), prefix, all, text)
	}
}
