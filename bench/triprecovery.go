package bench

import "time"

// TripRecovery is what one kind of breaker did once the dependency
// recovered, for the replicas that fail not alone, and what it had sent
// the dependency before, since the fleet stopped.
type TripRecovery struct {
	// FirstServed and LastServed are the first and the last replica's
	// first call let through from the recovery on, counted from the
	// recovery (-1: never, within Recover).
	FirstServed, LastServed time.Duration
	// Probes is the calls that reached the dependency while it was down,
	// from the moment the fleet stopped (its last replica's first
	// rejection) on; ProbesPerSecond their rate, fleet-wide, from that
	// moment to the recovery. Probes is -1 and the rate 0 if the fleet
	// never stopped.
	Probes          int64
	ProbesPerSecond float64
	// Rejected is the calls rejected after the recovery, of Calls made
	// then: calls the dependency could have served.
	Rejected, Calls int64
	// Relapse is how the replicas stopped again once the dependency
	// failed again, counted from then; with Relapse only.
	Relapse TripStop `json:",omitzero"`
}

// recoveryOf is the recovery of the loops that are not bad, whose fleet
// stopped at stopped into the outage (-1: never).
func recoveryOf(loops []*tripLoop, cfg TripConfig, stopped time.Duration) TripRecovery {
	r := TripRecovery{FirstServed: -1, LastServed: -1, Probes: -1}
	if stopped >= 0 {
		r.Probes = 0
	}
	everyone := true
	for _, l := range loops {
		if l.bad {
			continue
		}
		r.Rejected += l.recoveredRejected
		r.Calls += l.recoveredCalls
		for _, at := range l.downServed {
			if stopped >= 0 && at >= stopped {
				r.Probes++
			}
		}
		if l.served < 0 {
			everyone = false
			continue
		}
		if r.FirstServed < 0 || l.served < r.FirstServed {
			r.FirstServed = l.served
		}
		r.LastServed = max(r.LastServed, l.served)
	}
	if !everyone {
		r.LastServed = -1
	}
	if stopped >= 0 {
		r.ProbesPerSecond = float64(r.Probes) / (cfg.Down - stopped).Seconds()
	}
	if cfg.Relapse > 0 {
		r.Relapse = stopOf(loops, 1)
	}
	return r
}
