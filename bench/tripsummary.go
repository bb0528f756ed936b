package bench

// summarize makes the row of one kind of breaker from its loops, once
// they have returned.
func summarize(name string, loops []*tripLoop, cfg TripConfig) TripBreakerRow {
	row := TripBreakerRow{Breaker: name, TripStop: stopOf(loops, 0)}
	for _, l := range loops {
		if l.bad {
			n := int64(-1)
			if l.seen {
				n = l.failures
			}
			row.BadFailures = append(row.BadFailures, n)
			row.BadStopped = append(row.BadStopped, l.badStopped)
			row.BadRejected += l.rejected
			row.BadStarts += l.starts
			continue
		}
		row.HealthyRejected += l.healthyRejected
		row.SparedRejected += l.sparedRejected
		row.HealthyCalls += l.calls
	}
	if cfg.Recover > 0 {
		row.Recovery = recoveryOf(loops, cfg, row.LastStopped)
	}
	return row
}

// stopOf is how the loops that are not bad stopped in outage k: 0 the
// outage, 1 the relapse.
func stopOf(loops []*tripLoop, k int) TripStop {
	st := TripStop{FirstStopped: -1, LastStopped: -1}
	everyone := true
	for _, l := range loops {
		if l.bad {
			continue
		}
		o := l.outages[k]
		st.Hung += o.hung
		if o.stopped < 0 {
			everyone = false
			st.Absorbed += o.failedSince
			continue
		}
		st.Absorbed += o.absorbed
		if st.FirstStopped < 0 || o.stopped < st.FirstStopped {
			st.FirstStopped = o.stopped
		}
		st.LastStopped = max(st.LastStopped, o.stopped)
	}
	if !everyone {
		st.LastStopped = -1
	}
	return st
}
