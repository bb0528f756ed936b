package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestJSONHoldsWhatAppliesToTheState: show --json and list --json carry a
// field of the breaker's state only in the states it applies to, so that
// a closed scope that once opened carries no opened_at.
func TestJSONHoldsWhatAppliesToTheState(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	// svc/open stays open while the test reads it: on a loaded machine the
	// default open period ended first, and it read half-open.
	f.p.OpenFor, f.p.MaxOpenFor = time.Hour, 2*time.Hour
	c := newCLI(t, srv.Addr())
	ctx := context.Background()
	note := coordinator.Note{By: "alice", Reason: "json"}
	f.trip("svc/recovered")
	if _, err := f.c.Release(ctx, coordinator.CommandRequest{Scope: "svc/recovered", Policy: f.p, Note: note}); err != nil {
		t.Fatal(err)
	}
	f.trip("svc/open")
	f.admit("svc/isolated")
	if _, err := f.c.Isolate(ctx, coordinator.CommandRequest{Scope: "svc/isolated", Policy: f.p, Note: note}); err != nil {
		t.Fatal(err)
	}
	f.admit("svc/disabled")
	if _, err := f.c.Disable(ctx, coordinator.CommandRequest{Scope: "svc/disabled", Policy: f.p, Note: note}); err != nil {
		t.Fatal(err)
	}
	stateFields := []string{"consecutive_failures", "opened_at", "open_until", "probes_in_flight", "probe_successes", "forced_at", "operator"}
	want := map[string][]string{
		"svc/recovered": {"consecutive_failures"},
		"svc/open":      {"opened_at", "open_until"},
		"svc/isolated":  {"opened_at", "forced_at", "operator"},
		"svc/disabled":  {"forced_at", "operator"},
	}
	has := func(fields map[string]any) []string {
		var got []string
		for _, k := range stateFields {
			if _, ok := fields[k]; ok {
				got = append(got, k)
			}
		}
		return got
	}
	for scope, w := range want {
		var shown map[string]any
		if err := json.Unmarshal([]byte(c.want(0, "", "", "show", scope, "--json").stdout), &shown); err != nil {
			t.Fatal(err)
		}
		if got := has(shown); !slices.Equal(got, w) {
			t.Errorf("show %s --json (%v) has %v; want %v", scope, shown["state"], got, w)
		}
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(c.want(0, "", "", "list", "--json").stdout), &listed); err != nil {
		t.Fatal(err)
	}
	for _, s := range listed {
		scope, _ := s["scope"].(string)
		if got := has(s); !slices.Equal(got, want[scope]) {
			t.Errorf("list --json: %s (%v) has %v; want %v", scope, s["state"], got, want[scope])
		}
	}
	if len(listed) != len(want) {
		t.Errorf("list --json: %d scopes; want %d", len(listed), len(want))
	}
}

// A half-open breaker's JSON carries its probes and when it opened, and
// nothing of the closed or forced states.
func TestJSONOfHalfOpen(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := coordinator.Snapshot{Scope: "svc/probing", State: coordinator.StateHalfOpen, Generation: 7,
		OpenedAt: at, ProbesInFlight: 1, ConsecutiveFailures: 2, ForcedAt: at}
	b, err := json.Marshal(toJSON(s))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"opened_at": true, "probes_in_flight": true, "probe_successes": true,
		"open_until": false, "consecutive_failures": false, "forced_at": false, "operator": false} {
		if _, ok := fields[k]; ok != want {
			t.Errorf("half-open JSON %s: has %s %v; want %v", b, k, ok, want)
		}
	}
}
