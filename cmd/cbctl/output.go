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
	"unicode/utf8"

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
		return unprintable(r) || unicode.IsSpace(r)
	}) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// quoteText prints text that cbctl did not write, as the coordinator
// stored it (a note, a transition's reason, a fingerprint), as is when it
// is printable UTF-8, else Go-quoted: a byte that an older version or a
// hand in redis-cli stored never reaches the terminal raw.
func quoteText(s string) string {
	if !strings.HasPrefix(s, `"`) && strings.IndexFunc(s, unprintable) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// unprintable: a byte that is not UTF-8 reads as unicode.ReplacementChar.
func unprintable(r rune) bool {
	return r == unicode.ReplacementChar || !unicode.IsPrint(r)
}

// escapeLines is text that may carry stored bytes (an error naming what a
// scope holds) for the terminal: line breaks and tabs stay, and every rune
// that is not printable, or byte that is not UTF-8, is written as Go
// would quote it.
func escapeLines(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r != '\n' && r != '\t' && unprintable(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == '\n' || r == '\t' || !unprintable(r) {
			b.WriteString(s[:n])
		} else {
			q := strconv.Quote(s[:n])
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}

// stateName is how cbctl names a listed scope's state: "corrupt" for one
// whose stored state cannot be read (Snapshot.Corrupt).
func stateName(s coordinator.Snapshot) string {
	if s.Corrupt != nil {
		return "corrupt"
	}
	return s.State.String()
}

func writeTable(w io.Writer, list []coordinator.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tSTATE\tGEN\tCALLS\tFAILURES\tSLOW\tOPEN UNTIL\tPROBES\tOUTLIERS\tNOTE")
	for _, s := range list {
		if s.Corrupt != nil {
			// Why goes to standard error, with the exit status (corruptErr).
			fmt.Fprintf(tw, "%s\tcorrupt\t-\t-\t-\t-\t-\t-\t-\t-\n", quoteScope(s.Scope))
			continue
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", quoteScope(s.Scope), s.State, s.Generation,
			s.Calls, s.Failures, s.Slow, formatTime(s.OpenUntil), s.ProbesInFlight, len(s.Outliers), note(s))
	}
	return tw.Flush()
}

// note is the operator's note in one field: "by alice: outage".
func note(s coordinator.Snapshot) string {
	switch {
	case s.ForcedAt.IsZero():
		return "-"
	case s.Operator.By == "":
		return quoteText(s.Operator.Reason)
	}
	return "by " + quoteText(s.Operator.By) + ": " + quoteText(s.Operator.Reason)
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
	row("throttled", s.Throttled)
	if s.WouldReject > 0 {
		row("dry runs would reject", s.WouldReject)
	}
	row("consecutive failures", s.ConsecutiveFailures)
	row("opened at", formatTime(s.OpenedAt))
	row("open until", formatTime(s.OpenUntil))
	row("probes in flight", s.ProbesInFlight)
	row("probe successes", s.ProbeSuccesses)
	if !s.ForcedAt.IsZero() {
		row("forced at", formatTime(s.ForcedAt))
		row("by", orDash(quoteText(s.Operator.By)))
		row("reason", orDash(quoteText(s.Operator.Reason)))
		if s.Operator.For > 0 {
			row("for", s.Operator.For)
		}
	}
	if t := s.LastTrip; !t.At.IsZero() {
		row("last trip", fmt.Sprintf("%s gen %d: %s", formatTime(t.At), t.Generation, quoteText(t.Reason)))
		row("window at the trip", fmt.Sprintf("%d calls, %d failures, %d slow", t.Calls, t.Failures, t.Slow))
	}
	row("outliers", len(s.Outliers))
	for _, o := range s.Outliers {
		row("outlier", fmt.Sprintf("%s since %s, until %s: %s", quoteScope(o.Replica), formatTime(o.Since), formatTime(o.Until), quoteText(o.Reason)))
	}
	if len(s.Policies) == 0 {
		row("policy in force", "- (no Record in the last window)")
	} else {
		row("policy in force", fmt.Sprintf("%s (%v)", quoteText(s.Policies[0].Fingerprint), s.Policies[0].Source))
	}
	row("policies seen", policiesSeen(len(s.Policies)))
	return tw.Flush()
}

// policiesSeen says how many policies Records carried in the last window.
func policiesSeen(n int) string {
	if n > 1 {
		return fmt.Sprintf("%d (replicas differ, or the policy changed in the window: cbctl policy show SCOPE)", n)
	}
	return strconv.Itoa(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// transitionLine is one transition on one line:
// "2030-01-01T00:00:00.000Z svc/Method closed -> isolated gen 4: isolated by alice: outage",
// with "replica pod-7 " before the states of one replica's.
func transitionLine(t coordinator.Transition) string {
	replica := ""
	if t.Replica != "" {
		replica = "replica " + quoteScope(t.Replica) + " "
	}
	return fmt.Sprintf("%s %s %s%v -> %v gen %d: %s", formatTime(t.At), quoteScope(t.Scope), replica, t.From, t.To, t.Generation, quoteText(t.Reason))
}

type noteJSON struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	For    string `json:"for,omitempty"`
}

type snapshotJSON struct {
	Scope string `json:"scope"`
	// State is "corrupt" for a listed scope whose stored state cannot be
	// read; Corrupt then says why, and every other field is zero.
	State      string `json:"state"`
	Corrupt    string `json:"corrupt,omitempty"`
	Generation uint64 `json:"generation"`
	Calls      int    `json:"calls"`
	Failures   int    `json:"failures"`
	Slow       int    `json:"slow"`
	Throttled  int    `json:"throttled"` // requests adaptive throttling rejected (Policy.Throttle)
	// WouldReject is what dry-run replicas let through that they would
	// have rejected, in this generation; left out at 0.
	WouldReject int `json:"would_reject,omitempty"`
	// The fields below are there only in the states they apply to:
	// consecutive_failures in closed; opened_at in open, half-open and
	// isolated; open_until in open, and isolated for a set time; the
	// probes in half-open; forced_at and operator in isolated and disabled.
	ConsecutiveFailures *int      `json:"consecutive_failures,omitempty"`
	OpenedAt            string    `json:"opened_at,omitempty"`
	OpenUntil           string    `json:"open_until,omitempty"`
	ProbesInFlight      *int      `json:"probes_in_flight,omitempty"`
	ProbeSuccesses      *int      `json:"probe_successes,omitempty"`
	ForcedAt            string    `json:"forced_at,omitempty"`
	Operator            *noteJSON `json:"operator,omitempty"`
	LastTrip            *tripJSON `json:"last_trip,omitempty"`
	// Outliers are the replicas found failing alone (Policy.Outliers),
	// which reject their own calls while the fleet's breaker is closed.
	Outliers []outlierJSON `json:"outliers,omitempty"`
	// Policy is the policy in force, as the last Record carried it;
	// absent when no Record came in the last window. PoliciesSeen counts
	// the distinct policies Records carried in it: more than one, and
	// replicas differ, or the policy changed within the window.
	Policy       *carriedPolicyJSON `json:"policy,omitempty"`
	PoliciesSeen int                `json:"policies_seen"`
}

type transitionJSON struct {
	Scope      string `json:"scope"`
	Replica    string `json:"replica,omitempty"` // one replica's outlier spell, not the scope's
	From       string `json:"from"`
	To         string `json:"to"`
	Generation uint64 `json:"generation"`
	At         string `json:"at"`
	Reason     string `json:"reason"`
}

// resultJSON is what an operator's command did. Changed: it made a
// transition, or replaced the note or end of a breaker already isolated
// (disabled), which Updated then tells.
type resultJSON struct {
	Scope      string          `json:"scope"`
	Changed    bool            `json:"changed"`
	State      string          `json:"state"`
	Generation uint64          `json:"generation"`
	Transition *transitionJSON `json:"transition"`
	Updated    *updateJSON     `json:"updated,omitempty"`
	Replicas   replicasJSON    `json:"replicas"`
}

// updateJSON is an update: each field only when it changed.
type updateJSON struct {
	Note      *noteUpdateJSON `json:"note,omitempty"`
	OpenUntil *timeUpdateJSON `json:"open_until,omitempty"`
}

type noteUpdateJSON struct {
	From noteJSON `json:"from"`
	To   noteJSON `json:"to"`
}

// timeUpdateJSON holds "" for no end: until released.
type timeUpdateJSON struct {
	From string `json:"from"`
	To   string `json:"to"`
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
	if s.Corrupt != nil {
		return snapshotJSON{Scope: s.Scope, State: stateName(s), Corrupt: s.Corrupt.Error()}
	}
	out := snapshotJSON{
		Scope: s.Scope, State: s.State.String(), Generation: s.Generation,
		Calls: s.Calls, Failures: s.Failures, Slow: s.Slow, Throttled: s.Throttled, WouldReject: s.WouldReject,
	}
	// The coordinator keeps when the breaker last opened through its
	// recovery; once closed that is history, which last_trip tells.
	switch s.State {
	case coordinator.StateClosed:
		out.ConsecutiveFailures = &s.ConsecutiveFailures
	case coordinator.StateOpen, coordinator.StateIsolated:
		out.OpenedAt, out.OpenUntil = jsonTime(s.OpenedAt), jsonTime(s.OpenUntil)
	case coordinator.StateHalfOpen:
		out.OpenedAt = jsonTime(s.OpenedAt)
		out.ProbesInFlight, out.ProbeSuccesses = &s.ProbesInFlight, &s.ProbeSuccesses
	}
	if (s.State == coordinator.StateIsolated || s.State == coordinator.StateDisabled) && !s.ForcedAt.IsZero() {
		n := toNoteJSON(s.Operator)
		out.ForcedAt, out.Operator = jsonTime(s.ForcedAt), &n
	}
	if len(s.Policies) > 0 {
		p := toSeenJSON(s.Policies[0])
		out.Policy, out.PoliciesSeen = &p, len(s.Policies)
	}
	if t := s.LastTrip; !t.At.IsZero() {
		out.LastTrip = &tripJSON{At: jsonTime(t.At), Reason: t.Reason, Generation: t.Generation,
			Calls: t.Calls, Failures: t.Failures, Slow: t.Slow}
	}
	for _, o := range s.Outliers {
		out.Outliers = append(out.Outliers, outlierJSON{Replica: o.Replica, Since: jsonTime(o.Since), Until: jsonTime(o.Until), Reason: o.Reason})
	}
	return out
}

// outlierJSON is a replica that the coordinator found failing alone.
type outlierJSON struct {
	Replica string `json:"replica"`
	Since   string `json:"since"`
	Until   string `json:"until"` // its period ends; then it probes
	Reason  string `json:"reason"`
}

// tripJSON is why and when the breaker last opened by its rules.
type tripJSON struct {
	At         string `json:"at"`
	Reason     string `json:"reason"`
	Generation uint64 `json:"generation"`
	Calls      int    `json:"calls"`
	Failures   int    `json:"failures"`
	Slow       int    `json:"slow"`
}

func toNoteJSON(n coordinator.Note) noteJSON {
	out := noteJSON{By: n.By, Reason: n.Reason}
	if n.For > 0 {
		out.For = n.For.String()
	}
	return out
}

// update is what isolate of an isolated breaker, or disable of a disabled
// one, replaced: they make no transition.
type update struct {
	noteFrom, noteTo   coordinator.Note
	untilFrom, untilTo time.Time
	note, until        bool // whether each changed
}

// updated compares the breaker before and after such a command.
func updated(before, after coordinator.Snapshot) update {
	return update{
		noteFrom: before.Operator, noteTo: after.Operator, note: before.Operator != after.Operator,
		untilFrom: before.OpenUntil, untilTo: after.OpenUntil, until: !before.OpenUntil.Equal(after.OpenUntil),
	}
}

// resultLine is what an operator's command did, on one line: its
// transition, what it updated, or "unchanged".
func resultLine(scope string, res coordinator.Result, u update) string {
	switch {
	case res.Transition != nil && res.Transition.From != res.Transition.To:
		return transitionLine(*res.Transition)
	case !u.note && !u.until:
		return fmt.Sprintf("unchanged: %s is %v in generation %d", quoteScope(scope), res.State, res.Generation)
	}
	var what []string
	if u.note {
		what = append(what, fmt.Sprintf("note %q -> %q", noteText(u.noteFrom), noteText(u.noteTo)))
	}
	if u.until {
		what = append(what, "ends "+endText(u.untilFrom)+" -> "+endText(u.untilTo))
	}
	return fmt.Sprintf("updated: %s stays %v in generation %d: %s", quoteScope(scope), res.State, res.Generation, strings.Join(what, "; "))
}

// noteText is a note in full: "by alice for 10m0s: outage".
func noteText(n coordinator.Note) string {
	var b []string
	if n.By != "" {
		b = append(b, "by "+n.By)
	}
	if n.For > 0 {
		b = append(b, "for "+n.For.String())
	}
	s := strings.Join(b, " ")
	if s == "" {
		return n.Reason
	}
	return s + ": " + n.Reason
}

func endText(t time.Time) string {
	if t.IsZero() {
		return "when released"
	}
	return formatTime(t)
}

func toResultJSON(scope string, res coordinator.Result, u update) resultJSON {
	out := resultJSON{Scope: scope, Changed: res.Transition != nil || u.note || u.until,
		State: res.State.String(), Generation: res.Generation,
		Replicas: replicasJSON{Wanted: res.Replicas.Wanted, Confirmed: res.Replicas.Confirmed}}
	if res.Transition != nil {
		t := toTransitionJSON(*res.Transition)
		out.Transition = &t
	}
	if u.note || u.until {
		out.Updated = &updateJSON{}
	}
	if u.note {
		out.Updated.Note = &noteUpdateJSON{From: toNoteJSON(u.noteFrom), To: toNoteJSON(u.noteTo)}
	}
	if u.until {
		out.Updated.OpenUntil = &timeUpdateJSON{From: jsonTime(u.untilFrom), To: jsonTime(u.untilTo)}
	}
	return out
}

func toTransitionJSON(t coordinator.Transition) transitionJSON {
	return transitionJSON{Scope: t.Scope, Replica: t.Replica, From: t.From.String(), To: t.To.String(),
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
