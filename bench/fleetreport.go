package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// fleetTable is one table of a fleet report: a header and rows of cells.
type fleetTable struct {
	title  string
	header []string
	rows   [][]string
}

// fleetTables lays rows out as the cost table, the load table and, when
// some run had a failing dependency, the detection table.
func fleetTables(rows []FleetRow) []fleetTable {
	cost := fleetTable{
		title: "Redis CPU (rss = replica-scope-second)",
		header: []string{"replicas×scopes", "redis", "options", "calls/rss",
			"Redis CPU µs/rss", "net of idle", "per replica µs/replica-s (quiet)", "per replica µs/rss", "calls µs/rss",
			"scripts/rss", "µs/script", "heartbeats/replica-s", "µs/publish", "Redis cores", "idle cores", "quiet scripts"},
	}
	load := fleetTable{
		title: "Load, memory and machine",
		header: []string{"replicas×scopes", "redis", "options", "scripts/s", "publish/s", "commands/s",
			"admits/rss", "records/rss", "coordinator p50/p99 µs", "key B/scope", "keys/scope",
			"conns/replica", "client buffers B/replica", "simulator cores", "other cores", "slow/errors/feeds lost/undelivered"},
	}
	detect := fleetTable{
		title: "Detection and propagation",
		header: []string{"replicas×scopes", "redis", "options", "failure", "trips", "unheard",
			"propagation p50 µs", "p99 µs", "max µs", "scopes stopped/tripped", "absorbed/scope", "window failures/scope",
			"excess/replica", "calls", "rejected", "failed", "undelivered outcomes"},
	}
	for _, r := range rows {
		size := fmt.Sprintf("%d×%d", r.Replicas, r.Scopes)
		redis, options := "single", r.RecordInterval
		if r.Cluster {
			redis = "cluster (3)"
		}
		if !r.Cache {
			options += ", no cache"
		}
		cost.rows = append(cost.rows, []string{size, redis, options, f1(r.CallsPerRSS),
			f1(r.RedisMicros), f1(r.RedisNetMicros), f1(r.ReplicaCPUMicros), f1(r.ReplicaCPUMicrosPerRSS), f1(r.ScopeCPUMicros),
			f2(r.ScriptsPerRSS), f1(r.ScriptMicros), f2(r.HeartbeatsPerReplicaSecond), f1(r.PublishMicros),
			f2(r.RedisCores), f4(r.RedisIdleCores), fmt.Sprint(r.QuietScripts)})
		load.rows = append(load.rows, []string{size, redis, options,
			f0(r.ScriptsPerSecond), f0(r.PublishesPerSecond), f0(r.CommandsPerSecond),
			f2(r.AdmitsPerRSS), f2(r.RecordsPerRSS), fmt.Sprintf("≤%.0f/≤%.0f", r.CoordinatorP50, r.CoordinatorP99),
			f0(r.KeyBytesPerScope), f1(r.KeysPerScope),
			f1(r.ClientsPerReplica), f0(r.ClientMemoryPerReplica), f2(r.ClientCores), f2(r.OtherCores),
			fmt.Sprintf("%d/%d/%d/%d", r.SlowCalls, r.CoordinatorErrors, r.FeedsLost, r.Undelivered)})
		if r.Failure == NoFailure.String() {
			continue
		}
		detect.rows = append(detect.rows, []string{size, redis, options, r.Failure,
			fmt.Sprint(r.Trips), fmt.Sprint(r.Unheard),
			f0(r.PropagationP50), f0(r.PropagationP99), f0(r.PropagationMax),
			fmt.Sprintf("%d/%d", r.StoppedScopes, r.StoppedScopes+r.UnstoppedScopes),
			f1(r.AbsorbedPerScope), f1(r.NeededPerScope), f2(r.ExcessPerReplica),
			fmt.Sprint(r.Calls), fmt.Sprint(r.Rejected), fmt.Sprint(r.Failed), fmt.Sprint(r.Undelivered)})
	}
	if len(detect.rows) == 0 {
		return []fleetTable{cost, load}
	}
	return []fleetTable{cost, load, detect}
}

// WriteFleetText writes rows as aligned text tables.
func WriteFleetText(w io.Writer, rows []FleetRow) error {
	for i, t := range fleetTables(rows) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, t.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(t.header, "\t")+"\t")
		for _, cells := range t.rows {
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// WriteFleetMarkdown writes rows as markdown tables.
func WriteFleetMarkdown(w io.Writer, rows []FleetRow) error {
	for i, t := range fleetTables(rows) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n\n| %s |\n|---|%s\n", t.title, strings.Join(t.header, " | "), strings.Repeat("---:|", len(t.header)-1))
		for _, cells := range t.rows {
			if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
				return err
			}
		}
	}
	return nil
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
func f4(v float64) string { return fmt.Sprintf("%.4f", v) }
