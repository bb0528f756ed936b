package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// exported is what the stdout exporter writes of a span, as far as the
// test looks.
type exported struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	StartTime   time.Time
	EndTime     time.Time
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// The transition spans it prints carry the time they happened and the span
// of the call in whose trace they are: none starts at year 1 or is a root.
func TestQuickstartPrintsSpansWithTimesAndParents(t *testing.T) {
	before := time.Now()
	var out bytes.Buffer
	if err := demo(&out); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	_, spans, ok := strings.Cut(out.String(), "The transition spans, as the OpenTelemetry stdout exporter wrote them:\n")
	if !ok {
		t.Fatalf("no exported spans in\n%s", &out)
	}
	lines := strings.Split(strings.TrimSpace(spans), "\n")
	transitions := map[string]bool{}
	for _, line := range lines {
		var s exported
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("exported span %q: %v", line, err)
		}
		attrs := map[string]any{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.Value.Value
		}
		what := fmt.Sprintf("%s %v -> %v", s.Name, attrs["cbgrpc.state.from"], attrs["cbgrpc.state.to"])
		transitions[what] = true
		if s.StartTime.Before(before) || s.EndTime.After(after) || s.EndTime.Before(s.StartTime) {
			t.Errorf("%s: from %v to %v; want within the run, %v to %v", what, s.StartTime, s.EndTime, before, after)
		}
		if zero := strings.Repeat("0", 16); s.Parent.SpanID == "" || s.Parent.SpanID == zero {
			t.Errorf("%s: parent span %q; want the span of the call that caused it", what, s.Parent.SpanID)
		}
		if s.Parent.TraceID != s.SpanContext.TraceID {
			t.Errorf("%s: in trace %s, its parent in trace %s", what, s.SpanContext.TraceID, s.Parent.TraceID)
		}
	}
	for _, want := range []string{"closed -> open", "open -> half-open", "half-open -> closed"} {
		if !transitions["cbgrpc.transition "+want] {
			t.Errorf("no %s span among %v\n%s", want, transitions, &out)
		}
	}
	shown, inCall := strings.Count(out.String(), "** breaker "), strings.Count(out.String(), ", in the trace of call ")
	if shown != len(lines) || inCall != shown {
		t.Errorf("the timeline shows %d transitions, %d of them in a call's trace; the exporter wrote %d\n%s", shown, inCall, len(lines), &out)
	}
}
