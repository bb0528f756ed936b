package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// spanLine is a span's first line in the demo's output, and attrLine one
// of its attributes.
var (
	spanLine = regexp.MustCompile(`^  (\S+)  trace ([0-9a-f]{32}), (no parent|child of span ([0-9a-f]{16})( of trace [0-9a-f]{32})?( \(call (\d+)\))?), ([\d.]+)s to ([\d.]+)s$`)
	attrLine = regexp.MustCompile(`^      ([a-z._]+)=(.*)$`)
)

// The transition spans it prints carry the time they happened and the span
// of the call in whose trace they are: none is a root, none is out of the
// run, and the timeline shows each.
func TestQuickstartPrintsSpansWithTimesAndParents(t *testing.T) {
	start := time.Now()
	var out bytes.Buffer
	if err := demo(&out); err != nil {
		t.Fatal(err)
	}
	run := time.Since(start).Seconds()
	_, spans, ok := strings.Cut(out.String(), "The transition spans, as an exporter receives them:\n")
	if !ok {
		t.Fatalf("no exported spans in\n%s", &out)
	}
	transitions := map[string]bool{}
	var n int
	var attrs map[string]string
	var head []string
	check := func() {
		if head == nil {
			return
		}
		what := head[1] + " " + attrs["cbgrpc.state.from"] + " -> " + attrs["cbgrpc.state.to"]
		transitions[what] = true
		if attrs["cbgrpc.reason"] == "" || attrs["cbgrpc.scope"] == "" {
			t.Errorf("%s: attributes %v; want its reason and scope", what, attrs)
		}
		from, _ := strconv.ParseFloat(head[8], 64)
		to, _ := strconv.ParseFloat(head[9], 64)
		if from < 0 || to < from || to > run {
			t.Errorf("%s: from %.2fs to %.2fs; want within the run, 0 to %.2fs", what, from, to, run)
		}
		if head[4] == "" || head[4] == strings.Repeat("0", 16) {
			t.Errorf("%s: %q; want the span of the call that caused it", what, head[3])
		}
		if head[5] != "" {
			t.Errorf("%s: %q; want its parent in its own trace", what, head[3])
		}
		if head[7] == "" {
			t.Errorf("%s: %q; want the parent to be a call's span", what, head[3])
		}
	}
	for _, line := range strings.Split(strings.TrimRight(spans, "\n"), "\n") {
		if m := spanLine.FindStringSubmatch(line); m != nil {
			check()
			head, attrs = m, map[string]string{}
			n++
			continue
		}
		m := attrLine.FindStringSubmatch(line)
		if m == nil || head == nil {
			t.Fatalf("not a span's line: %q\n%s", line, &out)
		}
		attrs[m[1]] = m[2]
	}
	check()
	for _, want := range []string{"closed -> open", "open -> half-open", "half-open -> closed"} {
		if !transitions["cbgrpc.transition "+want] {
			t.Errorf("no %s span among %v\n%s", want, transitions, &out)
		}
	}
	shown, inCall := strings.Count(out.String(), "** breaker "), strings.Count(out.String(), ", in the trace of call ")
	if shown != n || inCall != shown {
		t.Errorf("the timeline shows %d transitions, %d of them in a call's trace; the exporter received %d\n%s", shown, inCall, n, &out)
	}
	if strings.Contains(strings.Split(out.String(), "The transition spans")[0], "generation") {
		t.Errorf("the timeline shows generations, numbers no reader can use:\n%s", &out)
	}
}
