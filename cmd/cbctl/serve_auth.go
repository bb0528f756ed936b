package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Who may look and who may act, on the dashboard:
//
//   - without a token it listens on loopback only, and refuses a Host
//     header that does not name this machine, so that another site whose
//     name resolves to 127.0.0.1 (DNS rebinding) is never same-origin with
//     it;
//   - with a token, every request but the page's own files carries it: as
//     "Authorization: Bearer TOKEN", or as the session cookie that POST
//     /api/login gives a browser for it (HttpOnly, SameSite=Strict);
//   - every POST passes the CSRF check: Sec-Fetch-Site and Origin, when
//     the browser sends them, must say the dashboard's own page, and the
//     X-CBCTL-CSRF header must hold the value /api/info gives, which a
//     page of another origin cannot read.
const (
	sessionCookie = "cbctl_session"
	csrfHeader    = "X-CBCTL-CSRF"
	// contentPolicy lets the page run its own script and style only: a
	// scope holding markup could not run even if it reached the DOM as
	// markup.
	contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

// sessionOf is the session cookie's value for token: stable across
// restarts with the same token, and no use for learning the token.
func sessionOf(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("cbctl serve session"))
	return hex.EncodeToString(m.Sum(nil))
}

// guard sets the headers of every answer, and refuses a Host that is not
// this machine when no token is set.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if s.token == "" && !localHost(r.Host) {
			writeError(w, http.StatusForbidden, "host %q is not this machine: without a token the dashboard answers only to localhost and loopback addresses", r.Host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether a Host header names this machine.
func localHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorized lets a request through when no token is set or when it
// carries the token.
func (s *server) authorized(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" && !s.carriesToken(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cbctl serve"`)
			writeError(w, http.StatusUnauthorized, "this dashboard needs its token: log in on the page, or send Authorization: Bearer TOKEN")
			return
		}
		next(w, r)
	})
}

func (s *server) carriesToken(r *http.Request) bool {
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(bearer), []byte(s.token)) == 1
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.session)) == 1
}

// sameOrigin is the CSRF check of a POST that changes something.
func (s *server) sameOrigin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkOrigin(r); err != nil {
			writeError(w, http.StatusForbidden, "cross-site request refused: %v", err)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(s.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "cross-site request refused: no valid %s header (the page sends the value GET /api/info gives)", csrfHeader)
			return
		}
		next(w, r)
	}
}

// checkOrigin refuses a request that the browser says comes from another
// site. A client that is not a browser sends neither header.
func checkOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("Sec-Fetch-Site is %q; want same-origin", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if u, err := url.Parse(origin); err != nil || u.Host != r.Host {
			return fmt.Errorf("Origin %q is not this dashboard (%s)", origin, r.Host)
		}
	}
	return nil
}

// login gives a browser that sends the token the session cookie, so that
// its event stream, which cannot set headers, carries it too.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if err := checkOrigin(r); err != nil {
		writeError(w, http.StatusForbidden, "cross-site request refused: %v", err)
		return
	}
	if s.token == "" {
		writeError(w, http.StatusBadRequest, "this dashboard has no token: nothing to log in to")
		return
	}
	var in struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON object {\"token\": ...}: %v", err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(in.Token), []byte(s.token)) != 1 {
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.session, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}

// writeAPI writes v as JSON. The encoder escapes <, > and & in strings, so
// a scope holding markup stays text even to a careless reader.
func writeAPI(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeAPI(w, code, struct {
		Error string `json:"error"`
	}{fmt.Sprintf(format, args...)})
}
