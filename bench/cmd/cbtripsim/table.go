package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/bench"
)

type row struct {
	Group, Name string
	bench.TripRow
}

func ms(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func (r row) line() string {
	s := fmt.Sprintf("%s: %s, trips %q, outliers %d", r.Name, brief(r.Config, r.TripBreakerRow), r.Trips, len(r.Outliers))
	for _, p := range r.Peers {
		s += "; " + p.Breaker + ": " + brief(r.Config, p)
	}
	if r.Config.Recover > 0 {
		s += "; after the recovery, " + r.Breaker + ": " + briefRecovery(r.Config, r.TripBreakerRow.Recovery)
		for _, p := range r.Peers {
			s += "; " + p.Breaker + ": " + briefRecovery(r.Config, p.Recovery)
		}
	}
	return s
}

func brief(cfg bench.TripConfig, b bench.TripBreakerRow) string {
	s := fmt.Sprintf("stopped %s..%s, absorbed %d, healthy rejected %d of %d, bad failures %v (rejected %d)",
		ms(b.FirstStopped), ms(b.LastStopped), b.Absorbed, b.HealthyRejected, b.HealthyCalls, b.BadFailures, b.BadRejected)
	if cfg.Stall {
		s += fmt.Sprintf(", %d calls into the hole", b.Hung)
	}
	if cfg.Stall && cfg.Bad > 0 {
		s += ", bad replicas " + stoppedAt(b.BadStopped)
	}
	return s
}

// stoppedAt says when each bad replica stopped itself.
func stoppedAt(at []time.Duration) string {
	var each []string
	for _, d := range at {
		if d < 0 {
			each = append(each, "never stopped")
			continue
		}
		each = append(each, "stopped "+ms(d)+" after it started")
	}
	return strings.Join(each, ", ")
}

func briefRecovery(cfg bench.TripConfig, r bench.TripRecovery) string {
	s := fmt.Sprintf("serving again %s..%s, %d calls into the dead dependency (%.2f/s), %d of %d rejected",
		ms(r.FirstServed), ms(r.LastServed), r.Probes, r.ProbesPerSecond, r.Rejected, r.Calls)
	if cfg.Relapse > 0 {
		s += fmt.Sprintf(", relapse stopped %s..%s, absorbed %d", ms(r.Relapse.FirstStopped), ms(r.Relapse.LastStopped), r.Relapse.Absorbed)
	}
	return s
}

// table writes a row per run and breaker, cbgrpc's, then its peers';
// and, for the runs with a recovery, a second table of what came after
// the outage.
func table(w io.Writer, rows []row) {
	onsetTable(w, rows)
	var recovered []row
	for _, r := range rows {
		if r.Config.Recover > 0 {
			recovered = append(recovered, r)
		}
	}
	if len(recovered) > 0 {
		fmt.Fprintln(w)
		recoveryTable(w, recovered)
	}
}

func onsetTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| run | breaker | first / last replica stopped after down | failing calls absorbed | healthy calls rejected | bad replica's failures before it rejected | fleet trips | outlier verdicts |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|---:|")
	for _, r := range rows {
		trips := "none"
		if len(r.Trips) > 0 {
			trips = fmt.Sprintf("%d: %q", len(r.Trips), r.Trips[0])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d |\n", r.Name, cells(r.Config, r.TripBreakerRow), trips, len(r.Outliers))
		for _, p := range r.Peers {
			fmt.Fprintf(w, "| | %s | – | – |\n", cells(r.Config, p))
		}
		if len(r.Peers) == 0 && r.Config.SlowShare > 0 {
			fmt.Fprintln(w, "| | peers | n/a: they count no slow calls | n/a | n/a | n/a | – | – |")
		}
	}
}

// cells are the columns one kind of breaker fills, from its name to the
// bad replicas' failures.
func cells(cfg bench.TripConfig, b bench.TripBreakerRow) string {
	stopped, absorbed := "–", "–"
	if cfg.Down > 0 {
		stopped, absorbed = ms(b.FirstStopped)+" / "+ms(b.LastStopped), fmt.Sprint(b.Absorbed)
		if b.LastStopped < 0 {
			// Counted until the outage's end for the replicas that never stopped.
			absorbed = "≥ " + absorbed
		}
		if cfg.Stall {
			absorbed += fmt.Sprintf("; %d hung calls into the hole in all", b.Hung)
		}
	}
	bad := "–"
	if len(b.BadFailures) > 0 {
		bad = strings.Trim(fmt.Sprint(b.BadFailures), "[]")
		if cfg.BadRestart > 0 {
			bad += fmt.Sprintf(" over %d starts", b.BadStarts)
		}
		if cfg.Stall {
			bad += "; " + stoppedAt(b.BadStopped)
		}
	}
	healthy := fmt.Sprintf("%d of %d", b.HealthyRejected, b.HealthyCalls)
	if cfg.DownReplicas > 0 {
		healthy += fmt.Sprintf(", and %d outside the zone while down", b.SparedRejected)
	}
	return fmt.Sprintf("%s | %s | %s | %s | %s", b.Breaker, stopped, absorbed, healthy, bad)
}

func recoveryTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| run | breaker | first / last replica serving again after the recovery | calls into the dead dependency after the fleet stopped | healthy calls rejected after the recovery | first / last replica stopped after the relapse | failing calls absorbed in the relapse |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", r.Name, recoveryCells(r.Config, r.TripBreakerRow))
		for _, p := range r.Peers {
			fmt.Fprintf(w, "| | %s |\n", recoveryCells(r.Config, p))
		}
	}
}

// recoveryCells are the columns of the recovery table one kind of breaker
// fills, from its name on.
func recoveryCells(cfg bench.TripConfig, b bench.TripBreakerRow) string {
	r := b.Recovery
	probes := "n/a: never stopped"
	if r.Probes >= 0 {
		probes = fmt.Sprintf("%d (%.2f/s)", r.Probes, r.ProbesPerSecond)
	}
	stopped, absorbed := "–", "–"
	if cfg.Relapse > 0 {
		stopped, absorbed = ms(r.Relapse.FirstStopped)+" / "+ms(r.Relapse.LastStopped), fmt.Sprint(r.Relapse.Absorbed)
		if r.Relapse.LastStopped < 0 {
			absorbed = "≥ " + absorbed
		}
	}
	return fmt.Sprintf("%s | %s / %s | %s | %d of %d | %s | %s", b.Breaker, ms(r.FirstServed), ms(r.LastServed), probes, r.Rejected, r.Calls, stopped, absorbed)
}
