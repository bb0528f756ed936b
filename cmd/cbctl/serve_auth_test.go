package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// With a token, every request but the page's files needs it; a browser
// logs in once for a cookie.
func TestServeToken(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.admit("svc/a")
	const token = "0123456789abcdef-token"
	s := startServe(t, srv.Addr(), map[string]string{tokenEnv: token})
	if !strings.Contains(s.stderr.String(), "token required") {
		t.Errorf("serve did not say it requires its token:\n%s", s.stderr)
	}
	s.want(request{path: "/"}, 200, "<title>")
	for _, path := range []string{"/api/info", "/api/scopes", "/api/events"} {
		a := s.want(request{path: path}, 401, "this dashboard needs its token")
		if a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s without the token: no WWW-Authenticate", path)
		}
		s.want(request{path: path, header: map[string]string{"Authorization": "Bearer wrong-token-0123456789"}}, 401)
	}
	s.token = token
	info := s.info()
	s.token = ""
	// A POST with the CSRF header but no token is refused, and changes nothing.
	s.want(s.post("/api/isolate", info.CSRF, actionJSON{Scope: "svc/a", Reason: "no token"}), 401)
	if st := f.admit("svc/a").State; st != coordinator.StateClosed {
		t.Fatalf("svc/a is %v after a POST without the token", st)
	}

	login := func(tok string) answer {
		b, _ := json.Marshal(map[string]string{"token": tok})
		return s.do(request{method: "POST", path: "/api/login", body: string(b),
			header: map[string]string{"Origin": s.url, "Content-Type": "application/json"}})
	}
	if a := login("wrong"); a.code != 401 {
		t.Errorf("login with a wrong token: %d %s", a.code, a.body)
	}
	a := login(token)
	cookie := a.header.Get("Set-Cookie")
	if a.code != 204 || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, token) {
		t.Fatalf("login: %d, Set-Cookie %q", a.code, cookie)
	}
	session := map[string]string{"Cookie": strings.SplitN(cookie, ";", 2)[0]}
	s.want(request{path: "/api/scopes", header: session}, 200, `"scope":"svc/a"`)
	r := s.post("/api/isolate", info.CSRF, actionJSON{Scope: "svc/a", Reason: "with the cookie"})
	r.header["Cookie"] = session["Cookie"]
	s.want(r, 200, `closed -\u003e isolated`)
}

// --read-only serves the page and the listing, and refuses every change.
func TestServeReadOnly(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.admit("svc/a")
	s := startServe(t, srv.Addr(), nil, "--read-only")
	info := s.info()
	if !info.ReadOnly {
		t.Errorf("info %+v; want read_only", info)
	}
	s.want(request{path: "/api/scopes"}, 200, `"scope":"svc/a"`)
	for _, op := range []string{"isolate", "release", "disable", "enable"} {
		s.want(s.post("/api/"+op, info.CSRF, actionJSON{Scope: "svc/a", Reason: "read-only"}), 403, "read-only: this dashboard was started with --read-only")
	}
	if st := f.admit("svc/a").State; st != coordinator.StateClosed {
		t.Fatalf("svc/a is %v after refused POSTs", st)
	}
	if !strings.Contains(s.stderr.String(), "(read-only, no token: loopback only)") {
		t.Errorf("serve did not say it is read-only:\n%s", s.stderr)
	}
}
