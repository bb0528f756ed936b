package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// served is a cbctl serve run in this process, as main runs it.
type served struct {
	t      *testing.T
	url    string // "http://127.0.0.1:PORT"
	stderr *syncBuffer
	cancel context.CancelFunc
	done   chan int
	once   sync.Once
	code   int
	token  string // what info and post send as the bearer token
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingLine = regexp.MustCompile(`cbctl: serve: dashboard on (http://\S+)/ `)

// startServe runs cbctl serve against the Redis at addr on a free
// loopback port, with env as its environment, until the test ends.
func startServe(t *testing.T, addr string, env map[string]string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{t: t, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	getenv := func(k string) string {
		if k == "CBCTL_REDIS_ADDR" {
			return addr
		}
		return env[k]
	}
	go func() {
		s.done <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), io.Discard, s.stderr, getenv)
	}()
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := servingLine.FindStringSubmatch(s.stderr.String()); m != nil {
			s.url = m[1]
			return s
		}
		select {
		case code := <-s.done:
			t.Fatalf("cbctl serve exited with %d before serving:\n%s", code, s.stderr)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cbctl serve did not say where it serves within 10s:\n%s", s.stderr)
		}
	}
}

// stop interrupts serve, as SIGINT does, and returns its exit code.
func (s *served) stop() int {
	s.once.Do(func() {
		s.cancel()
		select {
		case s.code = <-s.done:
		case <-time.After(10 * time.Second):
			s.t.Errorf("cbctl serve did not end within 10s of its context\n%s", s.stderr)
			s.code = -1
		}
	})
	return s.code
}

// request is one HTTP request to the dashboard.
type request struct {
	method, path string
	header       map[string]string
	body         string
}

type answer struct {
	code   int
	header http.Header
	body   string
}

func (s *served) do(r request) answer {
	s.t.Helper()
	req, err := http.NewRequest(cmpOr(r.method, "GET"), s.url+r.path, strings.NewReader(r.body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range r.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, r.path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(body)}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// want does r and checks the status and that the body holds each text.
func (s *served) want(r request, code int, texts ...string) answer {
	s.t.Helper()
	a := s.do(r)
	if a.code != code {
		s.t.Errorf("%s %s: status %d, want %d; body %s", cmpOr(r.method, "GET"), r.path, a.code, code, a.body)
	}
	for _, text := range texts {
		if !strings.Contains(a.body, text) {
			s.t.Errorf("%s %s: body %s; want it to hold %q", cmpOr(r.method, "GET"), r.path, a.body, text)
		}
	}
	return a
}

func (s *served) info() infoJSON {
	s.t.Helper()
	var info infoJSON
	decode(s.t, s.want(request{path: "/api/info", header: s.bearer()}, 200).body, &info)
	return info
}

// bearer is the header that carries s.token, if the test set it.
func (s *served) bearer() map[string]string {
	if s.token != "" {
		return map[string]string{"Authorization": "Bearer " + s.token}
	}
	return nil
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
}

// post is a POST of the dashboard's own page: same origin, with the CSRF
// header.
func (s *served) post(path string, csrf string, body any) request {
	b, _ := json.Marshal(body)
	h := map[string]string{"Content-Type": "application/json", csrfHeader: csrf, "Origin": s.url, "Sec-Fetch-Site": "same-origin"}
	for k, v := range s.bearer() {
		h[k] = v
	}
	return request{method: "POST", path: path, header: h, body: string(b)}
}

// htmlScope is a scope that would run script if it reached the page as
// markup.
const htmlScope = `svc/<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`

// The page, its files and the listing; an action needs the CSRF header
// and the page's own origin, and goes through the command's code.
func TestServeAPI(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.trip("svc/pkg.S/Trip")
	f.admit("svc/pkg.S/Fine")
	f.admit(htmlScope)
	s := startServe(t, srv.Addr(), nil)

	a := s.want(request{path: "/"}, 200, `<script src="app.js" defer></script>`)
	if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("page's Content-Security-Policy %q; want script-src 'self'", csp)
	}
	s.want(request{path: "/app.js"}, 200, "textContent")
	s.want(request{path: "/style.css"}, 200, ".tile")
	if a := s.do(request{path: "/app.js"}); strings.Contains(a.body, "innerHTML") || strings.Contains(a.body, "insertAdjacentHTML") {
		t.Error("app.js uses innerHTML: data must reach the page as text")
	}

	info := s.info()
	if info.ReadOnly || info.CSRF == "" || info.MinCalls != 20 || info.PageSize != defaultPageSize {
		t.Errorf("info %+v", info)
	}
	a = s.want(request{path: "/api/scopes"}, 200)
	var p pageJSON
	decode(t, a.body, &p)
	if p.Scopes != 3 || p.Matched != 3 || len(p.Rows) != 3 || p.Rows[0].Scope != "svc/pkg.S/Trip" || p.Rows[0].State != "open" ||
		p.Rows[0].LastTrip == nil || p.States["open"] != 1 || p.States["closed"] != 2 {
		t.Errorf("listing: %+v", p)
	}
	// A scope holding markup is JSON-escaped text: no "<" reaches the body.
	if strings.Contains(a.body, "<img") || strings.Contains(a.body, "<script") || !strings.Contains(a.body, `svc/\u003cimg src=x`) {
		t.Errorf("listing body holds the scope's markup unescaped:\n%s", a.body)
	}
	found := false
	for _, r := range p.Rows {
		found = found || r.Scope == htmlScope
	}
	if !found {
		t.Errorf("listing lost the scope holding markup: %+v", p.Rows)
	}
	s.want(request{path: "/api/scopes?q=FINE"}, 200, `"matched":1`, `"scope":"svc/pkg.S/Fine"`)
	s.want(request{path: "/api/scopes?sort=nope"}, 400, `sort \"nope\": want state, ratio or scope`)
	s.want(request{path: "/api/scopes?size=0"}, 400, `size: \"0\": want a number from 1 to 1000`)

	// CSRF: each refusal names its cause, and changes nothing.
	const scope = "svc/pkg.S/Fine"
	ok := s.post("/api/isolate", info.CSRF, actionJSON{Scope: scope, Reason: "from the page", By: "alice"})
	for _, c := range []struct {
		name   string
		method string
		header map[string]string // replaces ok's; "" removes
		body   string            // replaces ok's
		code   int
		answer string
	}{
		{name: "no CSRF header", header: map[string]string{csrfHeader: ""}, code: 403, answer: "no valid X-CBCTL-CSRF header"},
		{name: "wrong CSRF header", header: map[string]string{csrfHeader: "guess"}, code: 403, answer: "no valid X-CBCTL-CSRF header"},
		{name: "other origin", header: map[string]string{"Origin": "http://evil.example"}, code: 403, answer: `Origin \"http://evil.example\" is not this dashboard`},
		{name: "cross-site", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, code: 403, answer: `Sec-Fetch-Site is \"cross-site\"`},
		{name: "DNS rebinding", header: map[string]string{"Host": "evil.example:80"}, code: 403, answer: `host \"evil.example:80\" is not this machine`},
		{name: "GET", method: "GET", code: 405},
		{name: "no reason", body: `{"scope": "svc/pkg.S/Fine"}`, code: 400, answer: "reason: the dashboard asks a reason"},
		{name: "unknown field", body: `{"scope": "svc/pkg.S/Fine", "reason": "x", "force": true}`, code: 400, answer: `unknown field \"force\"`},
		{name: "bad for", body: `{"scope": "svc/pkg.S/Fine", "reason": "x", "for": "soon"}`, code: 400, answer: `for \"soon\": want a duration`},
		{name: "unknown scope", body: `{"scope": "svc/typo", "reason": "x"}`, code: 404, answer: "scope svc/typo not found"},
	} {
		r := request{method: cmpOr(c.method, ok.method), path: ok.path, body: cmpOr(c.body, ok.body), header: map[string]string{}}
		for k, v := range ok.header {
			r.header[k] = v
		}
		for k, v := range c.header {
			if v == "" {
				delete(r.header, k)
			} else {
				r.header[k] = v
			}
		}
		if a := s.want(r, c.code, c.answer); a.code != c.code {
			t.Logf("%s: %s", c.name, a.body)
		}
	}
	if st := f.admit(scope).State; st != coordinator.StateClosed {
		t.Fatalf("after the refused requests %s is %v; want closed", scope, st)
	}

	a = s.want(ok, 200, `"durable":"none"`, `"replicas":"no replica to wait for"`)
	var ev actionEventJSON
	decode(t, a.body, &ev)
	if ev.Result == nil || ev.Result.State != "isolated" || !strings.Contains(ev.Line, "closed -> isolated gen") ||
		!strings.Contains(ev.Line, "isolated by alice: from the page") {
		t.Errorf("isolate from the page answered %+v", ev)
	}
	// The command line sees what the page did: the same code made it.
	newCLI(t, srv.Addr()).want(0, "state:                isolated", "", "show", scope)
	newCLI(t, srv.Addr()).want(0, "reason:               from the page", "", "show", scope)
	if !strings.Contains(s.stderr.String(), "isolate svc/pkg.S/Fine by alice: ") {
		t.Errorf("serve did not log the action on stderr:\n%s", s.stderr)
	}
	if code := s.stop(); code != 0 {
		t.Errorf("serve exit %d after its context ended; want 0\n%s", code, s.stderr)
	}
}
