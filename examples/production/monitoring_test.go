package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/internal/freeport"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The rules and the dashboard that monitoring/ ships, proven: promtool's
// unit tests of the rules, and a real Prometheus that scrapes a run of this
// example beside a small fleet, evaluates the rules and answers every query
// of the dashboard.

// monitoring is the folder of the rules and the dashboard.
const monitoring = "../../monitoring"

func TestRulesUnitTests(t *testing.T) {
	promtool := redistest.Tool(t, "promtool") // Debian: apt-get install prometheus
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
	bin := redistest.Tool(t, "prometheus")
	requireRedis(t)
	rules := loadRules(t)
	queries := dashboardQueries(t)

	f := startFleet(t)
	example := freeAddr(t)
	prom := startPrometheus(t, bin, map[string][]string{"production": {example}, "fleet": f.targets()})
	begin := time.Now()

	var tr timedTranscript
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), &tr, config{metrics: example, outage: 6 * time.Second, timeout: loadedTimeout})
	}()
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
	port, err := freeport.Loopback(false)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
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
