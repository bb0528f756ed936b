package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// TestRampTimeline runs the demo: the breaker trips and closes, and after
// the close the admitted share starts low and rises to all calls.
func TestRampTimeline(t *testing.T) {
	var out bytes.Buffer
	shared := memory.New()
	if err := demo(&out, func() coordinator.Coordinator { return shared }); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	var shares []float64
	closed := false
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "-> closed") {
			closed = true
			continue
		}
		var at, share float64
		var calls, ramp, open int
		if n, _ := fmt.Sscanf(line, "%fs %d %f%% %d %d", &at, &calls, &share, &ramp, &open); n == 5 && closed && calls > 0 {
			shares = append(shares, share)
		}
	}
	if len(shares) < 20 {
		t.Fatalf("%d slots after the close; want the ramp's 2 s and more:\n%s", len(shares), out.String())
	}
	first, late := shares[1], shares[len(shares)-1]
	if first > 50 || late < 95 {
		t.Errorf("admitted share %.0f%% early in the ramp, %.0f%% after it; want it to start low (<50%%) and end at all calls", first, late)
	}
}
