package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPushbackOpensOnce: the server's pushback opens the breaker once, for
// its second, with the pushback as the reason; calls are rejected then,
// and the breaker closes again after the server recovers.
func TestPushbackOpensOnce(t *testing.T) {
	var out bytes.Buffer
	if err := demo(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	text := out.String()
	if n := strings.Count(text, "closed -> open (server pushback 1s)"); n != 1 {
		t.Errorf("%d transitions by the pushback; want 1", n)
	}
	if !strings.Contains(text, "rejected, not sent (open") {
		t.Error("no call rejected while the pushback held")
	}
	if !strings.Contains(text, "half-open -> closed") {
		t.Error("the breaker did not close again")
	}
}
