package main

// A real Prometheus server for the monitoring tests.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
