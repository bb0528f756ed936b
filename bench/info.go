package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// serverStats is what the simulator reads from INFO, summed over the
// servers of a target (one, or a cluster's masters).
type serverStats struct {
	cpu      float64                // seconds: used_cpu_sys + used_cpu_user
	clients  int64                  // connected_clients
	commands map[string]commandStat // INFO commandstats, by lower-case command name
	// clientMemory is what the normal clients' buffers hold
	// (mem_clients_normal): a fleet's connections, apart from its keys.
	clientMemory int64
}

// commandStat is one line of INFO commandstats.
type commandStat struct{ calls, usec int64 }

// sub returns the change from earlier to s.
func (s serverStats) sub(earlier serverStats) serverStats {
	d := serverStats{cpu: s.cpu - earlier.cpu, clients: s.clients,
		clientMemory: s.clientMemory, commands: make(map[string]commandStat, len(s.commands))}
	for name, c := range s.commands {
		e := earlier.commands[name]
		d.commands[name] = commandStat{calls: c.calls - e.calls, usec: c.usec - e.usec}
	}
	return d
}

// sum adds the stats of the named commands.
func (s serverStats) sum(names ...string) commandStat {
	var t commandStat
	for _, n := range names {
		t.calls += s.commands[n].calls
		t.usec += s.commands[n].usec
	}
	return t
}

// readStats reads and sums INFO cpu, memory, clients and commandstats of
// every server.
func readStats(ctx context.Context, servers []*goredis.Client) (serverStats, error) {
	total := serverStats{commands: make(map[string]commandStat)}
	for _, c := range servers {
		info, err := c.Info(ctx, "cpu", "memory", "clients", "commandstats").Result()
		if err != nil {
			return serverStats{}, fmt.Errorf("INFO on %s: %w", c.Options().Addr, err)
		}
		f := infoFields(info)
		sys, err1 := strconv.ParseFloat(f["used_cpu_sys"], 64)
		user, err2 := strconv.ParseFloat(f["used_cpu_user"], 64)
		clients, err3 := strconv.ParseInt(f["connected_clients"], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return serverStats{}, fmt.Errorf("INFO on %s lacks used_cpu_sys, used_cpu_user or connected_clients", c.Options().Addr)
		}
		total.cpu += sys + user
		total.clients += clients
		// Redis 7 has it; an older server reads 0.
		clientMemory, _ := strconv.ParseInt(f["mem_clients_normal"], 10, 64)
		total.clientMemory += clientMemory
		for name, s := range commandStats(info) {
			t := total.commands[name]
			total.commands[name] = commandStat{calls: t.calls + s.calls, usec: t.usec + s.usec}
		}
	}
	return total, nil
}

// infoFields reads the name:value lines of an INFO reply.
func infoFields(info string) map[string]string {
	f := make(map[string]string)
	for line := range strings.Lines(info) {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(name, "#") {
			f[name] = value
		}
	}
	return f
}

// commandStats reads the cmdstat_ lines of an INFO reply:
// "cmdstat_evalsha:calls=10,usec=440,usec_per_call=44.00,...".
func commandStats(info string) map[string]commandStat {
	stats := make(map[string]commandStat)
	for name, value := range infoFields(info) {
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		var s commandStat
		for kv := range strings.SplitSeq(value, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[cmd] = s
	}
	return stats
}

// keyMemory returns how many keys the servers hold and the bytes MEMORY
// USAGE reports for them all. The servers are private to the run: every
// key is the fleet's.
func keyMemory(ctx context.Context, servers []*goredis.Client) (keys, bytes int64, err error) {
	for _, c := range servers {
		iter := c.Scan(ctx, 0, "", 1000).Iterator()
		var names []string
		for iter.Next(ctx) {
			names = append(names, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return 0, 0, fmt.Errorf("SCAN on %s: %w", c.Options().Addr, err)
		}
		cmds, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range names {
				p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		if err != nil && err != goredis.Nil {
			return 0, 0, fmt.Errorf("MEMORY USAGE on %s: %w", c.Options().Addr, err)
		}
		for _, cmd := range cmds {
			// A key that expired between SCAN and MEMORY USAGE reads nil.
			if n, err := cmd.(*goredis.IntCmd).Result(); err == nil {
				keys++
				bytes += n
			}
		}
	}
	return keys, bytes, nil
}
