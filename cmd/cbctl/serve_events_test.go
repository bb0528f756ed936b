package main

import (
	"bufio"
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The event stream delivers a transition made elsewhere in the fleet, and
// the operator's actions; stopping serve closes it, and the feed, and
// leaves no goroutine behind.
func TestServeEvents(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.admit("svc/events")
	before := ourGoroutines()
	s := startServe(t, srv.Addr(), nil, "--refresh", "100ms")
	info := s.info()
	s.want(request{path: "/api/scopes"}, 200, `"scope":"svc/events"`)

	res, err := http.Get(s.url + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("events: Content-Type %q", ct)
	}
	events := make(chan [2]string, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				events <- [2]string{name, strings.TrimPrefix(line, "data: ")}
			}
		}
	}()
	next := func(name string) string {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the event stream ended before a %s event", name)
				}
				if ev[0] == name {
					return ev[1]
				}
			case <-timeout:
				t.Fatalf("no %s event within 10s", name)
			}
		}
	}
	if st := next("status"); !strings.Contains(st, `"live":true`) {
		// The first status may come before the feed follows the scope.
		for !strings.Contains(next("status"), `"live":true`) {
		}
	}

	f.trip("svc/events")
	var tr transitionEventJSON
	decode(t, next("transition"), &tr)
	if tr.Transition.Scope != "svc/events" || tr.Transition.To != "open" || tr.Row == nil || tr.Row.State != "open" ||
		tr.Row.LastTrip == nil || tr.Row.OpenUntil == "" {
		t.Errorf("transition event %+v", tr)
	}
	next("refresh") // the window counts, every --refresh while a page is open

	// The replica that tripped it keeps the span that recorded the trip:
	// the feed carries the trip again, with its cause, and the pages are
	// not told of it twice. The next transition they hear is the disable.
	q := coordinator.CauseRequest{Scope: "svc/events", Generation: tr.Transition.Generation, State: coordinator.StateOpen, Cause: cause}
	if kept, err := f.c.KeepCause(context.Background(), q); !kept || err != nil {
		t.Fatalf("keeping the trip's cause: %v, %v", kept, err)
	}
	s.want(s.post("/api/disable", info.CSRF, actionJSON{Scope: "svc/events", Reason: "flapping"}), 200)
	var act actionEventJSON
	for act.Op == "" || tr.Transition.To != "disabled" {
		select {
		case ev, ok := <-events:
			switch {
			case !ok:
				t.Fatal("the event stream ended before the disable's action and transition")
			case ev[0] == "action":
				decode(t, ev[1], &act)
			case ev[0] == "transition":
				decode(t, ev[1], &tr)
				if tr.Transition.To != "disabled" {
					t.Errorf("transition event %+v after the trip's; want the disable's (the trip's repeat, with its cause, is no news)", tr.Transition)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no disable action and transition within 10s (action %+v, transition %+v)", act, tr.Transition)
		}
	}
	if act.Op != "disable" || act.By != "dashboard" || !strings.Contains(act.Line, "open -> disabled") || act.Durable != "none" {
		t.Errorf("action event %+v", act)
	}

	if code := s.stop(); code != 0 {
		t.Errorf("serve exit %d; want 0\n%s", code, s.stderr)
	}
	for range events {
	} // the server closed the stream
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := ourGoroutines()
		if left <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines of serve left after it ended (%d before):\n%s", left, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ourGoroutines counts the goroutines of serve, its HTTP server and its
// feed.
func ourGoroutines() int {
	buf := make([]byte, 4<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	n := 0
	for _, s := range stacks {
		for _, mark := range []string{"main.(*hub)", "main.(*server)", "main.cmdServe", "net/http.(*conn).serve",
			"net/http.(*Server).Serve", "coordinator/redis.(*watch)"} {
			if strings.Contains(s, mark) {
				n++
				break
			}
		}
	}
	return n
}
