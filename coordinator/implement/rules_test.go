package implement_test

import (
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

func TestPermilleRoundsToNearest(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  int
	}{
		{0, 0}, {0.5, 500}, {0.3334, 333}, {0.3336, 334}, {0.0006, 1}, {0.0004, 0}, {0.9996, 1000}, {0.999, 999}, {0.1 + 0.2, 300},
	} {
		if got := implement.Permille(tc.ratio); got != tc.want {
			t.Errorf("Permille(%v) = %d; want %d", tc.ratio, got, tc.want)
		}
	}
}
