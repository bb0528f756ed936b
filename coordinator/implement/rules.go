package implement

import (
	"fmt"
	"math"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Permille turns a ratio into thousandths, rounding to the nearest. Both
// coordinators compare ratios as integers (failures*1000 >= permille*calls)
// so that 0.5 trips at exactly 2 of 4, whatever the float says.
func Permille(ratio float64) int {
	return int(math.Round(ratio * 1000))
}

// PushPeriod is the open period Push gives for period under p: capped at
// p.MaxOpenFor, or p.OpenFor when there is no back-off; the cap when
// period is 0 or less; never below a millisecond.
func PushPeriod(p coordinator.Policy, period time.Duration) time.Duration {
	limit := p.OpenFor
	if p.MaxOpenFor > 0 {
		limit = p.MaxOpenFor
	}
	if period <= 0 || period > limit {
		return limit
	}
	return max(period.Truncate(time.Millisecond), time.Millisecond)
}

// CheckPushReason refuses an empty reason for [coordinator.Pusher.Push]:
// the transition is for operators to read. The error wraps
// [coordinator.ErrInvalidNote].
func CheckPushReason(reason string) error {
	if reason == "" {
		return fmt.Errorf("%w: the reason of a push is empty; say why, for operators", coordinator.ErrInvalidNote)
	}
	return nil
}

// CheckOverride validates o as [coordinator.Controller.SetOverride] and
// ResetOverride must before they store it for t, given the fleet default
// in force: t's scope must be one a call can have
// ([coordinator.CheckScope]), and o laid over [coordinator.DefaultPolicy]
// (and, for a scope, over the fleet default) must make a valid policy. The
// error names the field.
func CheckOverride(t coordinator.Target, o coordinator.Override, fleet coordinator.Override) error {
	if !t.Fleet {
		if err := coordinator.CheckScope(t.Scope); err != nil {
			return err
		}
	}
	base := coordinator.DefaultPolicy()
	if !t.Fleet && len(fleet) > 0 {
		if p, err := fleet.Apply(base); err == nil {
			base = p
		}
	}
	_, err := o.Apply(base)
	return err
}
