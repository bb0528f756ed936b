package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// WriteMarkdown writes rows as a markdown table.
func WriteMarkdown(w io.Writer, rows []Row) error {
	// Sent: commands the client sends (round trips); server: every command
	// Redis ran, including those inside scripts (INFO commandstats).
	if _, err := fmt.Fprintln(w, "| configuration | p50 µs | p99 µs | p50 / none | RPS, 1 caller | RPS, N callers | Redis cmds sent/RPC (1) | sent/RPC (N) | Redis server cmds/RPC (1) | server/RPC (N) | allocs/call | added allocs | errors |"); err != nil {
		return err
	}
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.2f | %.0f | %.0f (N=%d) | %.3f | %.4f | %.3f | %.4f | %.1f | %+.1f | %d |\n",
			r.Name, r.P50Micros, r.P99Micros, r.P50Ratio, r.RPS1, r.RPSConcurrent, r.Concurrent,
			r.SentPerRPC1, r.SentPerRPC, r.RedisPerRPC1, r.RedisPerRPC, r.AllocsPerCall, r.AddedAllocs, r.Errors)
	}
	return nil
}

// WriteJSON writes rows (of a comparison or of the fleet simulator) as
// indented JSON.
func WriteJSON[R Row | FleetRow](w io.Writer, rows []R) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// WriteFile creates path and writes it with write.
func WriteFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
