package cbgrpc

import "github.com/cbgrpc/cbgrpc/coordinator"

// WithDryRun makes the Breaker a dry run, to adopt the breaker safely: the
// coordinator runs the rules as usual, fleet-wide, so the breaker trips,
// probes and recovers and its transitions are traced and published, but
// this Breaker rejects no call. Each call it would have rejected (open,
// out of probe slots, ramping, throttled, an outlier, or a scope last seen
// open while the coordinator is unreachable) goes through and is counted
// in cbgrpc.decisions with cbgrpc.decided_by = dry_run, marked with a
// cbgrpc.dry_run event on the caller's span, and reported to the
// coordinator, which counts the fleet's in the scope's
// [coordinator.Snapshot].WouldReject (cbctl show, the dashboard). Its
// outcome is not recorded: an enforcing Breaker would not have made the
// call, so the window sees of a dry-run fleet what it would see of an
// enforcing one. Probes are admitted and settled as always.
func WithDryRun() Option {
	return optionFunc(func(c *config) { c.dryRun = true })
}

// letThrough makes, for a dry run, a call c its admission rejected (err,
// an [*OpenError]) one that goes through and whose outcome is not taken,
// and reports it to the coordinator. Telemetry counted and marked it
// where it was decided. Other results pass unchanged.
func (b *Breaker) letThrough(c *call, err error) error {
	if !b.cfg.dryRun || err == nil {
		return err
	}
	if _, ok := err.(*OpenError); !ok {
		return err
	}
	c.fate = unprotected
	if c.gen != 0 {
		// Reported, so that the fleet sees what enforcing would reject
		// (coordinator.Snapshot.WouldReject); 0: decided without the
		// coordinator, which would not hear it.
		b.rec.add(&item{scope: c.scope, outcome: coordinator.Outcome{Generation: c.gen, WouldReject: true}, at: c.start})
	}
	return nil
}
