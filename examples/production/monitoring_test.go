package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The rules and the dashboard that monitoring/ ships, proven: promtool's
// unit tests of the rules, and a real Prometheus that scrapes a run of this
// example beside a small fleet, evaluates the rules and answers every query
// of the dashboard.

// monitoring is the folder of the rules and the dashboard.
const monitoring = "../../monitoring"

// requireTool returns the path of a program the test runs; it skips the
// test when the program is missing, and fails it under CI=true.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (CI=true requires it; apt-get install %s): %v", name, pkg, err)
		}
		t.Skipf("%s not found (apt-get install %s): %v", name, pkg, err)
	}
	return path
}

func TestRulesUnitTests(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "cbgrpc-rules.yml"},
		{"test", "rules", "cbgrpc-rules_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = monitoring
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestPrometheusAnswersEveryQuery runs the example with an outage of 6 s
// and, beside it, a fleet of five replicas over a Redis of their own in
// which one replica fails alone (an outlier), one runs dry, one call
// stalls, the dependency fails on and off four times and Redis pauses
// twice. A
// real Prometheus scrapes them all every second with the rules loaded,
// each alert's "for" cut to 0 s. Every recording rule, every alert and
// every query of the dashboard must return data, and the open-breaker
// alert must fire for the example's breaker during its outage.
func TestPrometheusAnswersEveryQuery(t *testing.T) {
	bin := requireTool(t, "prometheus", "prometheus")
	requireRedis(t)
	rules := loadRules(t)
	queries := dashboardQueries(t)

	f := startFleet(t)
	example := freeAddr(t)
	prom := startPrometheus(t, bin, map[string][]string{"production": {example}, "fleet": f.targets()})
	begin := time.Now()

	var tr timedTranscript
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), &tr, config{metrics: example, outage: 6 * time.Second}) }()
	f.play(t)
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, tr.text())
	}
	down, back := tr.at("-- the inventory database goes down"), tr.at("-- the inventory database is back")
	if down.IsZero() || back.IsZero() {
		t.Fatalf("the transcript does not show the outage:\n%s", tr.text())
	}

	var exprs []string
	for _, r := range rules.recorded {
		exprs = append(exprs, r)
	}
	for _, a := range rules.alerts {
		exprs = append(exprs, fmt.Sprintf(`ALERTS{alertname=%q,alertstate="firing"}`, a))
	}
	exprs = append(exprs, queries...)
	// The last scrapes and evaluations come a second or two after the run.
	deadline := time.Now().Add(30 * time.Second)
	for _, e := range exprs {
		for {
			n, err := prom.rangeQuery(e, begin, time.Now())
			if err != nil {
				t.Errorf("%s: %v", e, err)
				break
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("no data for %s", e)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	firing := `ALERTS{alertname="CbgrpcBreakerOpen",alertstate="firing",job="production"}`
	first, last, err := prom.span(firing, begin, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the example's outage: %v to %v; its open-breaker alert fired from %v to %v",
		down.Sub(begin).Round(time.Millisecond), back.Sub(begin).Round(time.Millisecond),
		first.Sub(begin).Round(time.Millisecond), last.Sub(begin).Round(time.Millisecond))
	// A scrape and an evaluation a second each, then the recorded series
	// read by the alert's group: the alert may follow the trip by 3 s.
	if first.IsZero() || first.Before(down) || first.After(back) {
		t.Errorf("the open-breaker alert first fired at %v; want during the outage, %v to %v", first, down, back)
	}
}

// rules are the names in cbgrpc-rules.yml.
type rules struct {
	recorded []string
	alerts   []string
}

var (
	recordLine = regexp.MustCompile(`(?m)^\s*- record: (\S+)$`)
	alertLine  = regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`)
	forLine    = regexp.MustCompile(`(?m)^(\s*)for: \S+$`)
)

func loadRules(t *testing.T) rules {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoring, "cbgrpc-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var r rules
	for _, m := range recordLine.FindAllSubmatch(b, -1) {
		r.recorded = append(r.recorded, string(m[1]))
	}
	for _, m := range alertLine.FindAllSubmatch(b, -1) {
		r.alerts = append(r.alerts, string(m[1]))
	}
	if len(r.recorded) == 0 || len(r.alerts) == 0 {
		t.Fatalf("cbgrpc-rules.yml: %d recording rules, %d alerts; want some of each", len(r.recorded), len(r.alerts))
	}
	return r
}

// dashboardQueries returns the PromQL of every panel of the dashboard,
// with Grafana's variables set as a user with every job selected would
// have them.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoring, "cbgrpc-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("cbgrpc-dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$job", ".+", "$__rate_interval", "10s")
	var qs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, vars.Replace(tg.Expr))
		}
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return qs
}

// freeAddr returns a loopback address no one listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// timedTranscript is the example's transcript, with when each line came.
type timedTranscript struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []timedLine
}

type timedLine struct {
	text string
	at   time.Time
}

func (w *timedTranscript) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, timedLine{string(p), time.Now()})
	return w.buf.Write(p)
}

func (w *timedTranscript) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// at returns when the first line starting with prefix was written.
func (w *timedTranscript) at(prefix string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.HasPrefix(l.text, prefix) {
			return l.at
		}
	}
	return time.Time{}
}

// promServer is a running Prometheus server.
type promServer struct {
	url string
}

// startPrometheus starts a Prometheus that scrapes each job's targets
// every second and evaluates monitoring/'s rules every second, each
// alert's "for" cut to 0 s so that a run of seconds can fire it (the
// promtool tests hold the "for"s themselves).
func startPrometheus(t *testing.T, bin string, jobs map[string][]string) *promServer {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(monitoring, "cbgrpc-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), forLine.ReplaceAll(b, []byte("${1}for: 0s")), 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\nscrape_configs:\n")
	for job, targets := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", job, strings.Join(targets, ", "))
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	p := &promServer{url: "http://" + addr}
	want := 0
	for _, targets := range jobs {
		want += len(targets)
	}
	// Ready, Prometheus takes a few seconds more to hand its static
	// targets to the scrapers: the scenes must wait for the first scrape.
	for deadline := time.Now().Add(30 * time.Second); p.scraped() < want; time.Sleep(100 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not scrape its %d targets within 30s:\n%s", want, logs.String())
		}
	}
	return p
}

// scraped returns how many targets Prometheus has scraped, up or down.
func (p *promServer) scraped() int {
	resp, err := http.Get(p.url + "/api/v1/targets")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var answer struct {
		Data struct {
			ActiveTargets []struct{ LastScrape time.Time }
		}
	}
	if json.NewDecoder(resp.Body).Decode(&answer) != nil {
		return 0
	}
	n := 0
	for _, tg := range answer.Data.ActiveTargets {
		if tg.LastScrape.Year() > 1 {
			n++
		}
	}
	return n
}

// series is a range query's answer: each series' samples, as
// [unix seconds, "value"].
type series []struct {
	Metric map[string]string
	Values [][2]any
}

// query runs a range query over [from, to], a point a second.
func (p *promServer) query(expr string, from, to time.Time) (series, error) {
	q := url.Values{
		"query": {expr},
		"start": {fmt.Sprint(from.Unix())},
		"end":   {fmt.Sprint(to.Unix() + 1)},
		"step":  {"1"},
	}
	resp, err := http.Get(p.url + "/api/v1/query_range?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var answer struct {
		Status string
		Error  string
		Data   struct{ Result series }
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("%s: %w", body, err)
	}
	if answer.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", answer.Error)
	}
	return answer.Data.Result, nil
}

// rangeQuery returns how many samples expr has over [from, to].
func (p *promServer) rangeQuery(expr string, from, to time.Time) (int, error) {
	s, err := p.query(expr, from, to)
	n := 0
	for _, one := range s {
		n += len(one.Values)
	}
	return n, err
}

// span returns the first and last times at which expr has a sample.
func (p *promServer) span(expr string, from, to time.Time) (first, last time.Time, err error) {
	s, err := p.query(expr, from, to)
	for _, one := range s {
		for _, v := range one.Values {
			sec, _ := v[0].(float64)
			at := time.Unix(0, int64(sec*1e9))
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
	}
	return first, last, err
}

// flaky is the fleet's dependency: EmptyCall fails while it is down, and
// always for a replica whose path to it is broken; UnaryCall never
// answers.
type flaky struct {
	testgrpc.UnimplementedTestServiceServer
	down atomic.Bool
}

func (d *flaky) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	if d.down.Load() {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &testpb.Empty{}, nil
}

func (d *flaky) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// broken is a path to the dependency that fails every call.
type broken struct {
	testgrpc.UnimplementedTestServiceServer
}

func (broken) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return nil, status.Error(codes.Unavailable, "sidecar down")
}

// fleet is five replicas of a service, each a process of its own as far as
// Prometheus is concerned (its own /metrics), calling one dependency under
// one breaker in a Redis of their own.
type fleet struct {
	redis    *redistest.Server
	dep      *flaky
	replicas []*fleetReplica
}

type fleetReplica struct {
	name   string
	tel    *telemetry
	b      *cbgrpc.Breaker
	client testgrpc.TestServiceClient
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{redis: redistest.Start(t), dep: &flaky{}}
	good, bad := serveFleet(t, f.dep), serveFleet(t, broken{})
	p := coordinator.DefaultPolicy()
	p.Window, p.MinCalls, p.ConsecutiveFailures = 3*time.Second, 6, 5
	p.OpenFor, p.MaxOpenFor = 200*time.Millisecond, 400*time.Millisecond
	p.Probes, p.ProbeLease, p.ProbeSuccesses = 1, time.Second, 1
	for _, r := range []struct {
		name string
		addr string
		opts []cbgrpc.Option
	}{
		{"a", good, nil},
		{"b", good, nil},
		{"c", good, nil},
		{"canary", good, []cbgrpc.Option{cbgrpc.WithDryRun()}},
		{"broken", bad, nil},
	} {
		tel, err := startTelemetry(&printer{w: io.Discard}, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tel.shutdown(ctx)
		})
		opts := append([]cbgrpc.Option{
			cbgrpc.WithReplicaID(r.name),
			cbgrpc.WithPolicy(p),
			cbgrpc.WithScope(func(context.Context, string, string) string { return "payments" }),
			cbgrpc.WithScopeInMetrics(),
			cbgrpc.WithStallAfter(150 * time.Millisecond),
			cbgrpc.WithTracerProvider(tel.tp),
			cbgrpc.WithMeterProvider(tel.mp),
		}, r.opts...)
		b, err := cbgrpc.New(cbredis.New(f.redis.Client(t)), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		f.replicas = append(f.replicas, &fleetReplica{name: r.name, tel: tel, b: b, client: testgrpc.NewTestServiceClient(conn)})
	}
	return f
}

func serveFleet(t *testing.T, svc testgrpc.TestServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// targets are the replicas' /metrics addresses.
func (f *fleet) targets() []string {
	var ts []string
	for _, r := range f.replicas {
		ts = append(ts, strings.TrimSuffix(strings.TrimPrefix(r.tel.url, "http://"), "/metrics"))
	}
	return ts
}

// play has every replica call every 20 ms while the scenes pass: the
// broken replica fails alone for 3 s, one call stalls, the dependency
// goes down and up four times, and Redis pauses twice for 1.5 s (a
// counter's first value is no increase to Prometheus: the second pause's
// failures and drops are what rate() sees).
func (f *fleet) play(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range f.replicas {
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				callCtx, done := context.WithTimeout(ctx, time.Second)
				r.client.EmptyCall(callCtx, &testpb.Empty{})
				done()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(3 * time.Second)
	stallCtx, done := context.WithTimeout(ctx, time.Second)
	f.replicas[0].client.UnaryCall(stallCtx, &testpb.SimpleRequest{})
	done()
	for range 4 {
		f.dep.down.Store(true)
		time.Sleep(800 * time.Millisecond)
		f.dep.down.Store(false)
		time.Sleep(1200 * time.Millisecond)
	}
	for range 2 {
		f.redis.Pause()
		time.Sleep(1500 * time.Millisecond)
		f.redis.Resume()
		time.Sleep(1500 * time.Millisecond)
	}
}
