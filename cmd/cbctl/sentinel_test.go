package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// sentinelCLI runs cbctl with the Sentinel setup in its environment, and
// --addr's default pointing at nothing: a command that did not go through
// the Sentinel fails.
func sentinelCLI(t *testing.T, s *redistest.Sentinel) *cli {
	return newCLI(t, "127.0.0.1:1",
		"CBCTL_REDIS_SENTINEL="+strings.Join(s.SentinelAddrs(), ","), "CBCTL_REDIS_MASTER="+s.MasterName())
}

// wantReplicas runs a command with --json and checks the replicas it
// reports and its exit code.
func (c *cli) wantReplicas(code int, stderr string, want replicasJSON, args ...string) {
	c.t.Helper()
	r := c.want(code, "", stderr, append(args, "--json")...)
	var res resultJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Replicas != want {
		c.t.Errorf("cbctl %q: replicas %+v, %v; want %+v\n%s", args, res.Replicas, err, want, r.stdout)
	}
}

// cbctl finds the master through the Sentinels, from the environment or
// from flags, and follows it across a failover; a change the replica
// confirmed survives it.
func TestCLISentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	f := newFleet(t, s.FailoverClient(t))
	f.trip("svc/a")
	c := sentinelCLI(t, s)

	c.want(0, "svc/a", "", "list")
	c.wantChange(f, "svc/a", "open -> isolated gen %d: isolated by tester: failover drill", "isolate", "svc/a", "--reason", "failover drill")
	c.wantReplicas(0, "", replicasJSON{Wanted: 1, Confirmed: 1}, "isolate", "svc/a", "--reason", "again")

	s.Failover(t)
	c.want(0, "state:                isolated", "", "show", "svc/a")
	flags := newCLI(t, "127.0.0.1:1")
	sentinel := []string{"--sentinel", strings.Join(s.SentinelAddrs(), ","), "--master", s.MasterName()}
	r := flags.want(0, "", "", append([]string{"list"}, sentinel...)...)
	if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "svc/a isolated") {
		t.Errorf("list with --sentinel after a failover:\n%s\nwant svc/a isolated", r.stdout)
	}
	flags.wantChange(f, "svc/a", "isolated -> closed gen %d: released by tester", append([]string{"release", "svc/a"}, sentinel...)...)
}

// A change no replica confirmed is a warning and exit status 4; one that
// some replicas confirmed, a note. A change of the shared policy too.
func TestCLIUnconfirmed(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	f := newFleet(t, s.FailoverClient(t))
	c := sentinelCLI(t, s)
	c.wantChange(f, "svc/b", "closed -> disabled gen %d", "disable", "svc/b", "--reason", "flapping", "--create")
	c.wantReplicas(0, "cbctl: enable: note: confirmed by 1 of 2 replicas within 200ms; a failover to another may lose it",
		replicasJSON{Wanted: 2, Confirmed: 1}, "enable", "svc/b", "--replicas", "2", "--replica-timeout", "200ms")

	// The shared policy's changes wait for the replicas as well.
	c.want(0, "scope override: MinCalls=25", "", "policy", "set", "svc/b", "min_calls=25", "--replica-timeout", "200ms")

	s.CutReplication(t)
	c.want(4, "scope override: MinCalls=30", "cbctl: policy: warning: not confirmed by any replica (0 of 1 within 200ms)",
		"policy", "set", "svc/b", "min_calls=30", "--replica-timeout", "200ms")
	r := c.want(4, "closed -> isolated", "cbctl: isolate: warning: not confirmed by any replica (0 of 1 within 200ms): "+
		"the change is in force on the master, but a failover now would lose it; run the command again once the replicas are back",
		"isolate", "svc/b", "--reason", "cut", "--replica-timeout", "200ms")
	if lines := strings.Count(r.stderr, "\n"); lines != 1 {
		t.Errorf("the warning is %d lines; want one:\n%s", lines, r.stderr)
	}
	c.wantReplicas(4, "warning: not confirmed", replicasJSON{Wanted: 1, Confirmed: 0},
		"release", "svc/b", "--replica-timeout", "200ms")
}

// --sentinel and --master go together, and with neither --addr nor
// --cluster; a flag beats the environment.
func TestCLISentinelUsage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	none := newCLI(t, "127.0.0.1:1")
	for _, u := range []struct {
		args []string
		want string
	}{
		{[]string{"--sentinel", "127.0.0.1:1"}, `cbctl: list: --sentinel "127.0.0.1:1": give --master NAME (or $CBCTL_REDIS_MASTER)`},
		{[]string{"--master", "m"}, `cbctl: list: --master "m": it names a master the Sentinels monitor; give --sentinel too`},
		{[]string{"--sentinel", "127.0.0.1:1", "--master", "m", "--cluster"}, "cbctl: list: --cluster and --sentinel: "},
		{[]string{"--sentinel", "127.0.0.1:1", "--master", "m", "--addr", srv.Addr()}, "cbctl: list: --addr and --sentinel: give one of them"},
		{[]string{"--replicas", "1"}, "flag provided but not defined: --replicas"},
	} {
		none.want(2, "", u.want, append([]string{"list"}, u.args...)...)
	}
	none.want(2, "", "cbctl: isolate: --replicas -1: want 0", "isolate", "s", "--reason", "x", "--replicas", "-1")
	none.want(2, "", "cbctl: isolate: --replica-timeout 0s: want at least 1ms", "isolate", "s", "--reason", "x", "--replica-timeout", "0")
	none.want(2, "", "cbctl: isolate: --replica-timeout 5s: want at least 1ms, and less than --timeout 5s",
		"isolate", "s", "--reason", "x", "--replica-timeout", "5s", "--timeout", "5s")

	env := newCLI(t, "127.0.0.1:1", "CBCTL_REDIS_SENTINEL=127.0.0.1:1", "CBCTL_REDIS_MASTER=m")
	env.want(2, "", "cbctl: list: --cluster and $CBCTL_REDIS_SENTINEL: ", "list", "--cluster")
	env.want(0, "SCOPE", "", "list", "--addr", srv.Addr())
	newCLI(t, "127.0.0.1:1", "CBCTL_REDIS_SENTINEL=127.0.0.1:1").want(2, "", "$CBCTL_REDIS_SENTINEL \"127.0.0.1:1\": give --master NAME", "list")
}
