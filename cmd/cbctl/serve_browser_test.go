package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

var screenshot = flag.String("screenshot", "", "`PNG` file to write the browser test's view of the dashboard to (docs/dashboard.png)")

// replica is one service replica of the browser test's fleet: a Breaker
// on the shared Redis, calling the dependency over gRPC.
type replica struct {
	b      *cbgrpc.Breaker
	client testgrpc.TestServiceClient
}

// The dashboard end to end, in a real Chromium: a fleet of Breakers on a
// real Redis calls a real gRPC server; the page logs in with its token,
// shows the scopes, turns a tripped breaker's tile open without a reload,
// isolates a scope (which cbctl show then reports), refuses a request
// without the token, and shows a scope holding markup as text.
func TestServeBrowser(t *testing.T) {
	const width, height = 1280, 860
	b := startBrowser(t, width, height)
	srv := redistest.Start(t)
	dep := fleettest.NewServer(t)

	p := coordinator.DefaultPolicy()
	p.MinCalls, p.OpenFor, p.MaxOpenFor = 10, time.Minute, 10*time.Minute
	scopeOf := func(_ context.Context, _, method string) string { return "testservice" + method }
	var fleet []replica
	for range 3 {
		br, err := cbgrpc.New(cbredis.New(srv.Client(t)), cbgrpc.WithPolicy(p), cbgrpc.WithScope(scopeOf))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(dep.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(br.UnaryClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			conn.Close()
			br.Close()
		})
		fleet = append(fleet, replica{br, testgrpc.NewTestServiceClient(conn)})
	}
	ctx := context.Background()
	const (
		tripped  = "testservice/grpc.testing.TestService/EmptyCall"
		isolated = "testservice/grpc.testing.TestService/UnaryCall"
	)
	for i, r := range fleet {
		for range 2 + i {
			if _, err := r.client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Scopes of other dependencies, one with failures in its window, and
	// one whose name holds markup.
	coord := cbredis.New(srv.Client(t))
	record := func(scope string, calls, failures int) {
		d, err := coord.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "claim"})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]coordinator.Outcome, calls)
		for i := range out {
			out[i] = coordinator.Outcome{Generation: d.Generation, Failure: i < failures}
		}
		if _, err := coord.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: out}); err != nil {
			t.Fatal(err)
		}
	}
	record("ledger:443/ledger.v1.Ledger/Post", 9, 3)
	record("search:443/search.v1.Search/Query", 40, 1)
	record(htmlScope, 1, 0)
	if _, err := coord.Disable(ctx, coordinator.CommandRequest{Scope: "search:443/search.v1.Search/Query", Policy: p, Note: coordinator.Note{By: "bob", Reason: "INC-1235 false trips"}}); err != nil {
		t.Fatal(err)
	}

	const token = "e2e-token-0123456789"
	s := startServe(t, srv.Addr(), map[string]string{tokenEnv: token}, "--min-calls", "10", "--refresh", "500ms")

	// Without the token nothing but the page's own files is served.
	s.want(request{path: "/api/scopes"}, 401)
	s.want(s.post("/api/isolate", "any", actionJSON{Scope: isolated, Reason: "no token"}), 401)

	b.navigate(s.url + "/")
	b.waitFor("login form", `!document.getElementById("login").hidden`, 10*time.Second)
	b.eval(`document.getElementById("token").value = `+jsString(token)+`; document.getElementById("login-form").requestSubmit()`, nil)
	tileOf := func(scope string) string {
		return `[...document.querySelectorAll("#tiles .tile")].find(t => t.dataset.scope === ` + jsString(scope) + `)`
	}
	for _, scope := range []string{tripped, isolated, "ledger:443/ledger.v1.Ledger/Post", htmlScope} {
		b.waitFor("tile of "+scope, tileOf(scope), 10*time.Second)
	}
	b.waitFor("live feed", `document.getElementById("live").textContent === "live"`, 10*time.Second)
	var status int
	b.eval(`fetch("/api/scopes", {credentials: "omit"}).then(r => r.status)`, &status)
	if status != http.StatusUnauthorized {
		t.Errorf("the browser's request without the token: status %d; want 401", status)
	}

	// Markup in a scope is text: its tile shows it as written, and nothing ran.
	var shown string
	b.eval(tileOf(htmlScope)+`.querySelector(".scope").textContent`, &shown)
	var ran bool
	b.eval(`window.pwned !== undefined || document.querySelectorAll("#tiles img, #tiles script").length > 0`, &ran)
	if shown != htmlScope || ran {
		t.Errorf("the scope holding markup shows as %q (markup ran or became elements: %v); want %q as text", shown, ran, htmlScope)
	}

	// Trip a breaker: its tile turns open, without a reload.
	b.eval(`window.loadMark = "still the same page";
		window.openAt = 0;
		new MutationObserver(() => {
			const t = `+tileOf(tripped)+`;
			if (!window.openAt && t && t.dataset.state === "open") window.openAt = Date.now();
		}).observe(document.getElementById("tiles"), {subtree: true, childList: true, attributes: true})`, nil)
	dep.SetFailure(cbfleet.EmptyCall, 1)
	for i := 0; ; i++ {
		_, err := fleet[i%len(fleet)].client.EmptyCall(ctx, &testpb.Empty{})
		if errors.Is(err, cbgrpc.ErrOpen) {
			break
		}
		if i > 200 {
			t.Fatalf("the fleet did not trip %s after %d failing calls", tripped, i)
		}
	}
	snap, err := coord.Snapshot(ctx, tripped, p)
	if err != nil || snap.LastTrip.At.IsZero() {
		t.Fatalf("snapshot of the tripped scope: %+v, %v", snap, err)
	}
	b.waitFor("tile of the tripped scope open", `window.openAt > 0`, 5*time.Second)
	var openAt int64
	var mark string
	b.eval(`window.openAt`, &openAt)
	b.eval(`window.loadMark`, &mark)
	took := time.UnixMilli(openAt).Sub(snap.LastTrip.At)
	t.Logf("trip to open tile in the browser: %v (trip at %s on Redis's clock, tile open at %s)",
		took, formatTime(snap.LastTrip.At), formatTime(time.UnixMilli(openAt)))
	if took > time.Second {
		t.Errorf("the tile turned open %v after the trip; want within 1s", took)
	}
	if mark != "still the same page" {
		t.Error("the page was reloaded to show the trip")
	}
	var text string
	b.eval(tileOf(tripped)+`.innerText`, &text)
	for _, want := range []string{"OPEN", "last trip\nfailures ", " >= 50%", "open until", " · in "} {
		if !strings.Contains(text, want) {
			t.Errorf("the tripped tile reads %q; want %q in it", text, want)
		}
	}

	// A listing read before a transition and delivered after it leaves the
	// tile as the transition made it: the page asks for a listing, Redis
	// isolates the tripped scope while the answer, already read, waits,
	// and the answer arrives after the transition's event.
	read := make(chan struct{}, 1)
	hook := func() {
		select {
		case read <- struct{}{}:
		default:
		}
		time.Sleep(400 * time.Millisecond)
	}
	testHookListed.Store(&hook)
	b.eval(`window.staleSeq = ui.loadSeq + 1; window.stateAtStale = "";
		const rendered = render;
		render = function (p, seq) {
			rendered(p, seq);
			const t = `+tileOf(tripped)+`;
			if (seq === window.staleSeq && t) window.stateAtStale = t.dataset.state;
		};
		load(); true`, nil)
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("the page's listing did not reach the server")
	}
	if _, err := coord.Isolate(ctx, coordinator.CommandRequest{Scope: tripped, Policy: p, Note: coordinator.Note{By: "test", Reason: "while a listing is on its way"}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the tripped tile isolated by the event", tileOf(tripped)+`.dataset.state === "isolated"`, 5*time.Second)
	testHookListed.Store(nil)
	b.waitFor("the listing read before the isolation", `window.stateAtStale !== ""`, 5*time.Second)
	var stale string
	b.eval(`window.stateAtStale`, &stale)
	if stale != "isolated" {
		t.Errorf("after a listing read before the isolation arrived, the tile reads %q; want it left isolated", stale)
	}

	// Isolate a scope from the page, with a reason; cbctl show sees it.
	b.eval(tileOf(isolated)+`.querySelector("button.isolate").click()`, nil)
	b.waitFor("the isolate dialog", `document.getElementById("act").open`, 5*time.Second)
	b.eval(`document.getElementById("act-reason").value = "   "; document.getElementById("act-form").requestSubmit()`, nil)
	b.waitFor("the refusal of no reason", `document.getElementById("act-error").textContent.includes("Give a reason")`, 5*time.Second)
	b.eval(`document.getElementById("act-reason").value = "INC-1240 from the dashboard";
		document.getElementById("act-by").value = "alice";
		document.getElementById("act-form").requestSubmit()`, nil)
	b.waitFor("the isolation's result", `!document.getElementById("notice").hidden`, 10*time.Second)
	b.eval(`document.getElementById("notice").textContent`, &text)
	if !strings.Contains(text, "closed -> isolated gen") || !strings.Contains(text, "isolated by alice: INC-1240 from the dashboard") ||
		!strings.Contains(text, "no replica to wait for") {
		t.Errorf("the page's notice after isolate: %q", text)
	}
	b.waitFor("the isolated tile", tileOf(isolated)+`.dataset.state === "isolated"`, 5*time.Second)
	b.waitFor("the action in the activity log", `document.getElementById("activity").textContent.includes("alice on this dashboard: isolate")`, 5*time.Second)
	r := newCLI(t, srv.Addr()).want(0, "state:                isolated", "", "show", isolated)
	for _, want := range []string{"by:                   alice", "reason:               INC-1240 from the dashboard"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cbctl show %s:\n%s\nwant %q", isolated, r.stdout, want)
		}
	}

	if *screenshot != "" {
		b.waitFor("the isolated scope in its place", `document.querySelector("#tiles .tile").dataset.state === "isolated"`, 5*time.Second)
		b.screenshot(*screenshot)
		t.Logf("screenshot: %s", *screenshot)
	}
	if code := s.stop(); code != 0 {
		t.Errorf("serve exit %d\n%s", code, s.stderr)
	}
}
