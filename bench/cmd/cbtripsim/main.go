// Command cbtripsim measures what a fleet's breaker decides, over a
// redis-server it starts on a free loopback port (a fresh one per run):
// how fast the fleet stops calling a dependency that goes down after a
// healthy spell, and that noise alone never trips it; that a replica
// failing alone (its own sidecar broken) opens the breaker for itself
// only, whatever its rate; and that small fleets whose every replica
// fails still trip. Replicas are real Breakers (bench.RunTrip).
//
//	go run ./cmd/cbtripsim                 # every scenario at the default policy
//	go run ./cmd/cbtripsim -only onset,alone -md trip.md
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/bench"
	"github.com/cbgrpc/cbgrpc/coordinator"
)

// scenario is one named run.
type scenario struct {
	group, name string
	cfg         bench.TripConfig
}

func scenarios() []scenario {
	def := coordinator.DefaultPolicy()
	window := def.Window
	with := func(edit func(*coordinator.Policy)) coordinator.Policy {
		p := def
		edit(&p)
		return p
	}
	ratioOnly := with(func(p *coordinator.Policy) { p.ConsecutiveFailures = 0 })
	run10 := with(func(p *coordinator.Policy) { p.ConsecutiveFailures = 10 })
	two := with(func(p *coordinator.Policy) { p.Outliers = 2 })
	var out []scenario
	out = append(out,
		scenario{"onset", "8 replicas x 50/s, 5% noise for a window, then down", bench.TripConfig{Replicas: 8, Rate: 50, Noise: 0.05, Spell: window, Down: 5 * time.Second, Stagger: 20 * time.Millisecond}},
		scenario{"noise", "8 replicas x 50/s, 5% noise for two windows", bench.TripConfig{Replicas: 8, Rate: 50, Noise: 0.05, Spell: 2 * window}},
	)
	for _, rate := range []float64{50, 500, 0} {
		what := fmt.Sprintf("%.0f/s", rate)
		if rate == 0 {
			what = "a tight loop"
		}
		for _, p := range []struct {
			name string
			p    coordinator.Policy
		}{{"default policy", def}, {"ConsecutiveFailures 10", run10}, {"ConsecutiveFailures 0", ratioOnly}} {
			out = append(out, scenario{"alone", fmt.Sprintf("1 of 8 failing alone at %s, %s", what, p.name),
				bench.TripConfig{Replicas: 8, Rate: 50, Spell: 10 * time.Second, Bad: 1, BadRate: rate, Policy: p.p}})
		}
	}
	out = append(out,
		scenario{"alone", "2 of 8 failing alone in a tight loop, Outliers 2", bench.TripConfig{Replicas: 8, Rate: 50, Spell: 10 * time.Second, Bad: 2, Policy: two}},
		scenario{"small", "1 replica x 50/s, down", bench.TripConfig{Replicas: 1, Rate: 50, Noise: 0.05, Spell: 5 * time.Second, Down: 5 * time.Second}},
		scenario{"small", "2 replicas x 50/s, down", bench.TripConfig{Replicas: 2, Rate: 50, Noise: 0.05, Spell: 5 * time.Second, Down: 5 * time.Second, Stagger: 20 * time.Millisecond}},
	)
	return out
}

func main() {
	only := flag.String("only", "", "scenario groups to run, separated by commas (onset, noise, alone, small); empty: all")
	mdPath := flag.String("md", "", "also write the table as markdown here")
	jsonPath := flag.String("json", "", "write the rows as JSON here")
	flag.Parse()
	log.SetFlags(0)
	var rows []row
	for _, s := range scenarios() {
		if *only != "" && !strings.Contains(","+*only+",", ","+s.group+",") {
			continue
		}
		r, err := runOne(s.cfg)
		if err != nil {
			log.Fatalf("%s: %v", s.name, err)
		}
		rows = append(rows, row{Group: s.group, Name: s.name, TripRow: r})
		log.Print(rows[len(rows)-1].line())
	}
	if *mdPath != "" {
		if err := writeFile(*mdPath, func(w io.Writer) { table(w, rows) }); err != nil {
			log.Fatal(err)
		}
	}
	if *jsonPath != "" {
		if err := writeFile(*jsonPath, func(w io.Writer) { json.NewEncoder(w).Encode(rows) }); err != nil {
			log.Fatal(err)
		}
	}
	table(os.Stdout, rows)
}

func runOne(cfg bench.TripConfig) (bench.TripRow, error) {
	srv, err := bench.StartRedis()
	if err != nil {
		return bench.TripRow{}, err
	}
	defer srv.Stop()
	return bench.RunTrip(context.Background(), srv.Target(), cfg)
}

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
	return fmt.Sprintf("%s: stopped %s..%s, absorbed %d, healthy rejected %d of %d, bad failures %v (rejected %d), trips %q, outliers %d",
		r.Name, ms(r.FirstStopped), ms(r.LastStopped), r.Absorbed, r.HealthyRejected, r.HealthyCalls, r.BadFailures, r.BadRejected, r.Trips, len(r.Outliers))
}

func table(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| run | first / last replica stopped after down | failing calls absorbed | healthy calls rejected | bad replica's failures before it rejected | fleet trips | outlier verdicts |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|---:|")
	for _, r := range rows {
		stopped, absorbed := "–", "–"
		if r.Config.Down > 0 {
			stopped, absorbed = ms(r.FirstStopped)+" / "+ms(r.LastStopped), fmt.Sprint(r.Absorbed)
		}
		bad := "–"
		if len(r.BadFailures) > 0 {
			bad = strings.Trim(fmt.Sprint(r.BadFailures), "[]")
		}
		trips := "none"
		if len(r.Trips) > 0 {
			trips = fmt.Sprintf("%d: %q", len(r.Trips), r.Trips[0])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d of %d | %s | %s | %d |\n", r.Name, stopped, absorbed, r.HealthyRejected, r.HealthyCalls, bad, trips, len(r.Outliers))
	}
}

func writeFile(path string, write func(io.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	write(f)
	return f.Close()
}
