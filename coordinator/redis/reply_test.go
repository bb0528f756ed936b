package redis

import (
	"errors"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A reply is read by name: names a reader does not know are ignored, and
// a reply of the wrong shape, or without a name the reader needs, is the
// scope's corrupt state.
func TestReplyReadByName(t *testing.T) {
	calm := []any{"state", int64(0), "generation", int64(7), "now", int64(1000), "verdict", int64(0)}
	t.Run("unknown names ignored", func(t *testing.T) {
		a, err := readAnswer(append(calm, "from_a_newer_script", "x"), "s")
		if err != nil {
			t.Fatal(err)
		}
		if d, err := admitted("s", a); err != nil || d.Generation != 7 || d.RetryAfter != 0 || d.PolicyVersion != 0 {
			t.Errorf("admitted = %+v, %v; want generation 7, the left-out values 0", d, err)
		}
	})
	for _, c := range []struct {
		name  string
		reply []any
	}{
		{"odd", calm[:len(calm)-1]},
		{"a number for a name", []any{int64(1), int64(2)}},
		{"a name missing", calm[2:]},
		{"a value of the wrong type", append([]any{"state", "closed"}, calm[2:]...)},
		{"a negative generation", append([]any{"generation", int64(-1)}, calm[:2]...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := readAnswer(c.reply, "s"); !errors.Is(err, coordinator.ErrCorruptState) {
				t.Errorf("readAnswer(%v) = %v; want %v", c.reply, err, coordinator.ErrCorruptState)
			}
		})
	}
	t.Run("an operation's name missing", func(t *testing.T) {
		a, err := readAnswer(calm[:len(calm)-2], "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admitted("s", a); !errors.Is(err, coordinator.ErrCorruptState) {
			t.Errorf("admitted without a verdict: %v; want %v", err, coordinator.ErrCorruptState)
		}
	})
}
