// Command cbtripsim measures what a fleet's breaker decides, over a
// redis-server it starts on a free loopback port (a fresh one per run):
// how fast the fleet stops calling a dependency that goes down after a
// healthy spell, wholly, in part (a brownout, of errors or of latency) or
// for some replicas only (a zone), and that noise alone never trips it;
// that a replica failing alone (its own sidecar broken) opens the breaker
// for itself only, whatever its rate and however often it restarts with a
// new replica ID; that small or slow fleets whose every replica fails
// still trip; and, once the dependency recovers, how soon every replica
// serves again, how many calls the fleet sent the dead dependency after it
// stopped, and how it stops again if the dependency relapses; how fast it
// stops calling a dependency that stops answering (a stall, of unary
// calls or of server streams), and that a healthy dependency's slow calls
// never trip it. Replicas are real Breakers (bench.RunTrip); beside each
// run local breakers of gobreaker and failsafe-go at their defaults, on
// the same dependency, for comparison.
//
//	go run ./cmd/cbtripsim                 # every scenario at the default policy
//	go run ./cmd/cbtripsim -only brownout,zone -md trip.md
//	go run ./cmd/cbtripsim -only recovery -md recovery.md
//	go run ./cmd/cbtripsim -only stall -md stall.md
package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log"
	"os"
	"strings"

	"github.com/cbgrpc/cbgrpc/bench"
)

func main() {
	only := flag.String("only", "", "scenario groups to run, separated by commas (onset, noise, alone, small, brownout, zone, restart, lowrate, recovery, ramp, stall); empty: all")
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

func writeFile(path string, write func(io.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	write(f)
	return f.Close()
}
