package main

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// web is the dashboard: one page, its style and its script, served as
// they are (no build step, nothing fetched from elsewhere).
//
//go:embed web
var web embed.FS

// tokenEnv holds serve's token when --token is not given: a flag shows in
// the process list, the environment does not.
const tokenEnv = "CBCTL_SERVE_TOKEN"

// minToken is the shortest token serve accepts: a token guards who may
// isolate the fleet's dependencies.
const minToken = 16

// server is the dashboard of one cbctl serve.
type server struct {
	e        *env
	c        *cbredis.Coordinator
	p        coordinator.Policy
	hub      *hub
	readOnly bool
	// token, when set, is asked of every request but the page's own
	// files; session is the cookie a browser gets for it, and csrf the
	// header every POST carries (a cross-site page can neither read nor
	// set it).
	token, session, csrf string
}

func cmdServe(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	def := coordinator.DefaultPolicy()
	listen := fs.String("listen", "127.0.0.1:8080", "`HOST:PORT` to serve the dashboard on; an address beyond loopback needs a token")
	token := fs.String("token", "", "`TOKEN` every request must carry, at least 16 characters (default $"+tokenEnv+", which the process list does not show)")
	readOnly := fs.Bool("read-only", false, "serve the page without its buttons, and refuse isolate, release, disable and enable")
	refresh := fs.Duration("refresh", 2*time.Second, "how often the window counts are read again while a page is open, 100ms or more")
	ratio := fs.Float64("failure-ratio", def.FailureRatio, "the fleet's Policy.FailureRatio, the `RATIO` the page shows as the threshold")
	minCalls := fs.Int("min-calls", def.MinCalls, "the fleet's Policy.MinCalls, shown with the threshold")
	e.replicaFlags(fs)
	var host string
	ctx, _, c, p, _, err := e.setup(ctx, args, func(pos []string) error {
		if len(pos) != 0 {
			return usageErr("serve takes no argument, got %q", pos)
		}
		if *token == "" {
			*token = e.getenv(tokenEnv)
		}
		if *token != "" && len(*token) < minToken {
			return usageErr("--token (or $%s): %d characters; want at least %d", tokenEnv, len(*token), minToken)
		}
		var err error
		if host, _, err = net.SplitHostPort(*listen); err != nil {
			return usageErr("--listen %q: want HOST:PORT: %v", *listen, err)
		}
		if *refresh < 100*time.Millisecond {
			return usageErr("--refresh %v: want at least 100ms", *refresh)
		}
		return e.checkReplicaFlags()
	})
	if err != nil {
		return err
	}
	p.FailureRatio, p.MinCalls = *ratio, *minCalls
	if err := p.Validate(); err != nil {
		return usageErr("--failure-ratio %v --min-calls %d: %v", *ratio, *minCalls, err)
	}
	if *token == "" {
		local, err := loopback(ctx, host)
		if err != nil {
			return usageErr("--listen %q: %v", *listen, err)
		}
		if !local {
			return usageErr("--listen %q: not a loopback address; serving beyond this machine needs --token (or $%s)", *listen, tokenEnv)
		}
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *token == "" && !l.Addr().(*net.TCPAddr).IP.IsLoopback() {
		l.Close()
		return usageErr("--listen %q: bound %v, not a loopback address; serving beyond this machine needs --token (or $%s)", *listen, l.Addr(), tokenEnv)
	}
	s := &server{e: e, c: c, p: p, readOnly: *readOnly, token: *token, csrf: rand.Text()}
	if s.token != "" {
		s.session = sessionOf(s.token)
	}
	s.hub = newHub(c, p, *refresh, e.timeout)
	return s.serve(ctx, l)
}

// serve serves until ctx ends, then closes the event streams and the feed
// and returns once every goroutine it started has ended.
func (s *server) serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { s.hub.run(ctx) })
	srv := &http.Server{
		Handler: s.routes(),
		// Every request ends with ctx: an event stream never ends by
		// itself, and Shutdown waits for the requests in flight.
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          log.New(s.e.stderr, "cbctl: serve: ", 0),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	mode := "read-write"
	if s.readOnly {
		mode = "read-only"
	}
	auth := "no token: loopback only"
	if s.token != "" {
		auth = "token required"
	}
	fmt.Fprintf(s.e.stderr, "cbctl: serve: dashboard on http://%s/ (%s, %s)\n", l.Addr(), mode, auth)
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	cancel()
	stop, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	err := srv.Shutdown(stop)
	<-served
	return err
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	files, _ := fs.Sub(web, "web")
	page := http.FileServerFS(files)
	mux.Handle("GET /{$}", page)
	mux.Handle("GET /app.js", page)
	mux.Handle("GET /style.css", page)
	mux.HandleFunc("POST /api/login", s.login)
	mux.Handle("GET /api/info", s.authorized(s.info))
	mux.Handle("GET /api/scopes", s.authorized(s.listing))
	mux.Handle("GET /api/events", s.authorized(s.events))
	mux.Handle("POST /api/{op}", s.authorized(s.sameOrigin(s.act)))
	return s.guard(mux)
}

// info is what the page needs to know before it lists anything.
func (s *server) info(w http.ResponseWriter, r *http.Request) {
	writeAPI(w, http.StatusOK, infoJSON{
		ReadOnly: s.readOnly, CSRF: s.csrf, Now: jsonTime(time.Now()),
		Window: s.p.Window.String(), Buckets: s.p.Buckets,
		FailureRatio: s.p.FailureRatio, MinCalls: s.p.MinCalls,
		Refresh: s.hub.refresh.String(), PageSize: defaultPageSize, Version: version(),
	})
}

type infoJSON struct {
	ReadOnly     bool    `json:"read_only"`
	CSRF         string  `json:"csrf"` // the X-CBCTL-CSRF header every POST carries
	Now          string  `json:"now"`
	Window       string  `json:"window"`
	Buckets      int     `json:"buckets"`
	FailureRatio float64 `json:"failure_ratio"`
	MinCalls     int     `json:"min_calls"`
	Refresh      string  `json:"refresh"`
	PageSize     int     `json:"page_size"`
	Version      string  `json:"version"`
}

// loopback reports whether host names this machine only: a loopback
// address, or a name whose addresses are all loopback. "" is every
// interface.
func loopback(ctx context.Context, host string) (bool, error) {
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		var dns *net.DNSError
		if errors.As(err, &dns) {
			return false, fmt.Errorf("cannot resolve %s: %v", host, dns.Err)
		}
		return false, err
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(addrs) > 0, nil
}
