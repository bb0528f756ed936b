package cbgrpc

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every test that makes a Breaker with newBreaker checks, once its
// Breakers are closed, that none left a goroutine behind.

var leakChecked = struct {
	sync.Mutex
	m map[testing.TB]bool
}{m: make(map[testing.TB]bool)}

// checkNoGoroutines fails when a goroutine started by this package's
// library code (not by its tests) is still running. Goroutines started by
// Close's own waiting are given a moment to return. One started by a
// goroutine that ran before the test (a Breaker an example never closes,
// whose feed reconnects) is not the test's.
func checkNoGoroutines(t testing.TB, before map[string]string) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(2 * time.Second)
	for {
		left = goroutinesSince(before)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// goroutinesSince is ours that are neither in before nor started by one
// that is.
func goroutinesSince(before map[string]string) []string {
	var left []string
	for id, g := range ourGoroutines() {
		_, old := before[id]
		_, oldParent := before[parent(g)]
		if !old && !oldParent {
			left = append(left, g)
		}
	}
	return left
}

// parent names the goroutine that started g, a goroutine's stack as
// runtime.Stack writes it ("created by f in goroutine 7"), as
// ourGoroutines names goroutines ("goroutine 7"); "" if it does not say.
func parent(g string) string {
	i := strings.LastIndex(g, " in goroutine ")
	if i < 0 {
		return ""
	}
	n, _, _ := strings.Cut(g[i+len(" in goroutine "):], "\n")
	return "goroutine " + n
}

// ourGoroutines returns the goroutines started by library code of this
// package, by goroutine ID.
func ourGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ours := make(map[string]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		i := strings.Index(g, "\ncreated by github.com/cbgrpc/cbgrpc.")
		if i < 0 {
			continue
		}
		// The line after "created by" is the file that started it.
		rest := g[i+1:]
		lines := strings.SplitN(rest, "\n", 3)
		if len(lines) > 1 && strings.Contains(lines[1], "_test.go") {
			continue
		}
		id, _, _ := strings.Cut(g, " [")
		ours[id] = g
	}
	return ours
}
