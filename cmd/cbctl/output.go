package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// timeFormat is how cbctl prints the coordinator's times: UTC, to the
// millisecond the coordinators keep.
const timeFormat = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeFormat)
}

// quoteScope prints a scope as is when it is printable without spaces,
// else Go-quoted, so that a table row stays one line of fields.
func quoteScope(s string) string {
	if s != "" && !strings.HasPrefix(s, `"`) && strings.IndexFunc(s, func(r rune) bool {
		return r == unicode.ReplacementChar || unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func writeTable(w io.Writer, list []coordinator.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tSTATE\tGEN\tCALLS\tFAILURES\tSLOW\tOPEN UNTIL\tPROBES\tNOTE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", quoteScope(s.Scope), s.State, s.Generation,
			s.Calls, s.Failures, s.Slow, formatTime(s.OpenUntil), s.ProbesInFlight, note(s))
	}
	return tw.Flush()
}

// note is the operator's note in one field: "by alice: outage".
func note(s coordinator.Snapshot) string {
	switch {
	case s.ForcedAt.IsZero():
		return "-"
	case s.Operator.By == "":
		return s.Operator.Reason
	}
	return "by " + s.Operator.By + ": " + s.Operator.Reason
}

func writeDetail(w io.Writer, s coordinator.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("scope", quoteScope(s.Scope))
	row("state", s.State)
	row("generation", s.Generation)
	row("calls", s.Calls)
	row("failures", s.Failures)
	row("slow", s.Slow)
	row("consecutive failures", s.ConsecutiveFailures)
	row("opened at", formatTime(s.OpenedAt))
	row("open until", formatTime(s.OpenUntil))
	row("probes in flight", s.ProbesInFlight)
	row("probe successes", s.ProbeSuccesses)
	if !s.ForcedAt.IsZero() {
		row("forced at", formatTime(s.ForcedAt))
		row("by", orDash(s.Operator.By))
		row("reason", orDash(s.Operator.Reason))
		if s.Operator.For > 0 {
			row("for", s.Operator.For)
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// transitionLine is one transition on one line:
// "2030-01-01T00:00:00.000Z svc/Method closed -> isolated gen 4: isolated by alice: outage".
func transitionLine(t coordinator.Transition) string {
	return fmt.Sprintf("%s %s %v -> %v gen %d: %s", formatTime(t.At), quoteScope(t.Scope), t.From, t.To, t.Generation, t.Reason)
}

type noteJSON struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	For    string `json:"for,omitempty"`
}

type snapshotJSON struct {
	Scope               string    `json:"scope"`
	State               string    `json:"state"`
	Generation          uint64    `json:"generation"`
	Calls               int       `json:"calls"`
	Failures            int       `json:"failures"`
	Slow                int       `json:"slow"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	OpenedAt            string    `json:"opened_at,omitempty"`
	OpenUntil           string    `json:"open_until,omitempty"`
	ProbesInFlight      int       `json:"probes_in_flight"`
	ProbeSuccesses      int       `json:"probe_successes"`
	ForcedAt            string    `json:"forced_at,omitempty"`
	Operator            *noteJSON `json:"operator,omitempty"`
}

type transitionJSON struct {
	Scope      string `json:"scope"`
	From       string `json:"from"`
	To         string `json:"to"`
	Generation uint64 `json:"generation"`
	At         string `json:"at"`
	Reason     string `json:"reason"`
}

type resultJSON struct {
	Scope      string          `json:"scope"`
	Changed    bool            `json:"changed"`
	State      string          `json:"state"`
	Generation uint64          `json:"generation"`
	Transition *transitionJSON `json:"transition"`
	Replicas   replicasJSON    `json:"replicas"`
}

// replicasJSON is coordinator.Replication: wanted 0 when there was nothing
// to wait for.
type replicasJSON struct {
	Wanted    int `json:"wanted"`
	Confirmed int `json:"confirmed"`
}

func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

func toJSON(s coordinator.Snapshot) snapshotJSON {
	out := snapshotJSON{
		Scope: s.Scope, State: s.State.String(), Generation: s.Generation,
		Calls: s.Calls, Failures: s.Failures, Slow: s.Slow, ConsecutiveFailures: s.ConsecutiveFailures,
		OpenedAt: jsonTime(s.OpenedAt), OpenUntil: jsonTime(s.OpenUntil),
		ProbesInFlight: s.ProbesInFlight, ProbeSuccesses: s.ProbeSuccesses,
		ForcedAt: jsonTime(s.ForcedAt),
	}
	if !s.ForcedAt.IsZero() {
		out.Operator = &noteJSON{By: s.Operator.By, Reason: s.Operator.Reason}
		if s.Operator.For > 0 {
			out.Operator.For = s.Operator.For.String()
		}
	}
	return out
}

func toTransitionJSON(t coordinator.Transition) transitionJSON {
	return transitionJSON{Scope: t.Scope, From: t.From.String(), To: t.To.String(),
		Generation: t.Generation, At: jsonTime(t.At), Reason: t.Reason}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
