package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// doctor runs cbctl doctor --json, checks its exit code and returns what
// it found. Unless args set it, the coordinator timeout is relaxedTimeout.
func (c *cli) doctor(code int, args ...string) doctorJSON {
	c.t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--coordinator-timeout") }) {
		args = append(args, "--coordinator-timeout", relaxedTimeout)
	}
	r := c.want(code, "", "", append([]string{"doctor", "--json"}, args...)...)
	var out doctorJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		c.t.Fatalf("cbctl doctor %q: %v\n%s", args, err, r.stdout)
	}
	return out
}

// relaxedTimeout is the coordinator timeout doctor checks its PINGs
// against in the tests not about latency: on a loaded test host a PING
// may take tens of milliseconds, past the 50ms default, which
// TestDoctorLatencyAndReach tests the check with.
const relaxedTimeout = "5s"

// want checks that every finding of check has status and mentions text,
// and that there is one.
func (out doctorJSON) want(t *testing.T, check, status, text string) {
	t.Helper()
	n := 0
	for _, f := range out.Checks {
		if f.Check != check {
			continue
		}
		n++
		if f.Status != status || !strings.Contains(f.Found+" -> "+f.Change, text) {
			t.Errorf("doctor: %s %s: %s -> %s; want %s mentioning %q", f.Status, f.Check, f.Found, f.Change, status, text)
		}
	}
	if n == 0 {
		t.Errorf("doctor made no %s check: %+v", check, out.Checks)
	}
}

// wantOnly checks that every check but those named passed (ok, or skip
// for what does not apply).
func (out doctorJSON) wantOnly(t *testing.T, failing ...string) {
	t.Helper()
	for _, f := range out.Checks {
		if !slices.Contains(failing, f.Check) && f.Status != statusOK && f.Status != statusSkip {
			t.Errorf("doctor: %s %s: %s -> %s; want ok", f.Status, f.Check, f.Found, f.Change)
		}
	}
}

// A master with its replica, at the defaults, is healthy, with every
// check made; pointed at the replica, doctor says to use the master.
func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	c := newCLI(t, master.Addr())
	out := c.doctor(exitOK, "--fleet", "100", "--replicas", "1")
	if !out.Healthy || out.Warnings != 0 || out.Failures != 0 {
		t.Errorf("doctor of a healthy master: %+v", out)
	}
	out.wantOnly(t)
	var checks []string
	for _, f := range out.Checks {
		checks = append(checks, f.Check)
	}
	want := []string{"connect", "server", "replicas", "maxmemory-policy", "maxclients", "latency", "scripts", "acl", "ready", "pubsub", "hash-tag"}
	if !slices.Equal(checks, want) {
		t.Errorf("doctor made the checks %q; want %q", checks, want)
	}
	out.want(t, "replicas", statusOK, "WAIT 1 confirmed 1")
	out.want(t, "maxclients", statusOK, "--fleet 100 needs 300")
	out.want(t, "acl", statusOK, `user "default" holds the grant`)

	r := c.want(exitOK, "healthy: cbgrpc has what it needs here", "", "doctor", "--coordinator-timeout", relaxedTimeout)
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(line, "ok ") && !strings.HasPrefix(line, "skip ") && !strings.HasPrefix(line, "healthy:") {
			t.Errorf("doctor of a healthy master printed %q", line)
		}
	}

	newCLI(t, replica.Addr()).doctor(exitFailures).want(t, "replicas", statusFail, "point cbctl and the services at the master")
}

// allkeys-* may evict an open breaker's keys, which never expire: a
// warning, and exit status 6.
func TestDoctorEvictionPolicy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	out := newCLI(t, srv.Addr()).doctor(exitWarnings)
	out.want(t, "maxmemory-policy", statusWarn, "allkeys-lru")
	out.want(t, "maxmemory-policy", statusWarn, "set maxmemory-policy noeviction or a volatile-* policy")
	out.wantOnly(t, "maxmemory-policy")
	newCLI(t, srv.Addr()).want(exitWarnings, "warn  maxmemory-policy  allkeys-lru", "cbctl: doctor: 1 warning, no failure", "doctor", "--coordinator-timeout", relaxedTimeout)
}

// withoutRule is the documented grant without one of its words.
func withoutRule(rule string) string {
	return strings.Join(slices.DeleteFunc(strings.Fields(redistest.ACLGrant), func(w string) bool { return w == rule }), " ")
}

// A user without part of the grant: an administrator's doctor --user
// names the missing rule with ACL DRYRUN (ACL GETUSER on Redis 6); the user's own doctor finds it
// by use, in the scripts, and says what it could not check.
func TestDoctorMissingGrant(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.SetUser(t, "svc", "pw", withoutRule("+info"))
	srv.SetUser(t, "full", "pw", redistest.ACLGrant)

	admin := newCLI(t, srv.Addr())
	out := admin.doctor(exitFailures, "--user", "svc")
	out.want(t, "acl", statusFail, `user "svc" lacks part of the grant of docs/redis-acl.md: +info`)
	out.wantOnly(t, "acl")
	admin.doctor(exitOK, "--user", "full").want(t, "acl", statusOK, `user "full" holds the grant`)
	// More than the grant: a warning that names what.
	srv.SetUser(t, "wide", "pw", redistest.ACLGrant+" ~* +flushall +config|set")
	out = admin.doctor(exitWarnings, "--user", "wide")
	out.want(t, "acl", statusWarn, `user "wide" holds more than the grant of docs/redis-acl.md: keys outside cbgrpc:*, FLUSHALL, CONFIG SET;`)
	out.wantOnly(t, "acl")
	// The default user of a server with no ACL holds everything: said, not warned of.
	admin.doctor(exitOK, "--user", "default").want(t, "acl", statusOK, "and every command besides")
	admin.doctor(exitFailures, "--user", "nobody").want(t, "acl", statusFail, `no user "nobody"`)

	out = newCLI(t, srv.Addr(), "CBCTL_REDIS_USERNAME=svc", "CBCTL_REDIS_PASSWORD=pw").doctor(exitFailures)
	out.want(t, "scripts", statusFail, "a script may not call INFO")
	out.want(t, "server", statusFail, "grant +info")
	out.want(t, "ready", statusFail, "NOPERM")
	out.want(t, "maxmemory-policy", statusWarn, "could not be checked")
	out.want(t, "acl", statusSkip, "checked by use")
	out.wantOnly(t, "scripts", "server", "replicas", "ready", "maxmemory-policy", "maxclients", "acl")

	// The documented grant does without CONFIG, as managed services do:
	// doctor reads the settings from INFO instead.
	out = newCLI(t, srv.Addr(), "CBCTL_REDIS_USERNAME=full", "CBCTL_REDIS_PASSWORD=pw").doctor(exitOK)
	out.want(t, "maxclients", statusOK, "maxclients 10000 (read from INFO clients: CONFIG refused)")
	out.want(t, "maxmemory-policy", statusOK, "noeviction, maxmemory 0 (no limit yet) (read from INFO memory: CONFIG refused)")
	out.wantOnly(t)
}

// --replicas N says that operators' changes must reach N replicas, which
// a master without any cannot confirm.
func TestDoctorWaitWithoutReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCLI(t, srv.Addr())
	c.doctor(exitOK).want(t, "replicas", statusOK, "no replica")
	out := c.doctor(exitFailures, "--replicas", "1")
	out.want(t, "replicas", statusFail, "0 replicas connected, 1 expected (--replicas)")
	out.wantOnly(t, "replicas")
}

// maxclients must hold the connections of --fleet replicas, three each
// as docs/redis.md states.
func TestDoctorMaxclients(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "maxclients", "100").Err(); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, srv.Addr())
	out := c.doctor(exitFailures, "--fleet", "50")
	out.want(t, "maxclients", statusFail, "maxclients 100: room for 33 replicas at 3 connections each (docs/redis.md); --fleet 50 needs 150")
	out.want(t, "maxclients", statusFail, "raise maxclients to at least 150")
	out.wantOnly(t, "maxclients")
	c.doctor(exitWarnings, "--fleet", "32").want(t, "maxclients", statusWarn, "needs 96, close to the limit")
	c.doctor(exitOK, "--fleet", "30").want(t, "maxclients", statusOK, "needs 90")
}

// A round trip against a coordinator timeout no PING can beat fails;
// an unreachable Redis fails the first check and hides the others.
func TestDoctorLatencyAndReach(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	newCLI(t, srv.Addr()).doctor(exitFailures, "--coordinator-timeout", "1ns").want(t, "latency", statusFail, "coordinator timeout 1ns")
	out := newCLI(t, "127.0.0.1:1").doctor(exitFailures)
	out.want(t, "connect", statusFail, "unreachable")
	if len(out.Checks) != 1 {
		t.Errorf("doctor of an unreachable Redis: %+v; want the connect check alone", out.Checks)
	}
	newCLI(t, "127.0.0.1:1").want(exitUsage, "", "--fleet -1", "doctor", "--fleet", "-1")
}

// On a Cluster every master is checked, and the prefix's hash tags: one
// with a brace is refused before connecting.
func TestDoctorCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := newCLI(t, strings.Join(cl.Addrs(), ","))
	out := c.doctor(exitOK, "--cluster")
	out.wantOnly(t)
	out.want(t, "hash-tag", statusOK, "all 16384 slots served")
	out.want(t, "acl", statusOK, "holds the grant")
	var nodes []string
	for _, f := range out.Checks {
		if f.Check == "server" {
			nodes = append(nodes, f.Node)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("doctor --cluster checked the servers %q; want the three masters", nodes)
	}
	newCLI(t, cl.Addrs()[0]).doctor(exitFailures).want(t, "server", statusFail, "give --cluster")
	c.doctor(exitFailures, "--cluster", "--prefix", "{app}:").want(t, "hash-tag", statusFail, "holds a brace")
}

// Through Sentinels doctor checks the master they name, and its replica.
func TestDoctorSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	out := sentinelCLI(t, s).doctor(exitOK)
	out.wantOnly(t)
	out.want(t, "connect", statusOK, `master "`+s.MasterName()+`", found through the Sentinels`)
	out.want(t, "replicas", statusOK, "WAIT 1 confirmed 1")
}

// What doctor asks ACL DRYRUN about is the grant of docs/redis-acl.md,
// which redistest.ACLGrant holds word for word.
func TestDoctorGrantIsTheDocumented(t *testing.T) {
	var want []string
	for _, w := range strings.Fields(redistest.ACLGrant) {
		if strings.HasPrefix(w, "+") {
			want = append(want, w)
		}
	}
	var got []string
	for _, g := range grant("cbgrpc:", false) {
		got = append(got, g.rule)
	}
	if !slices.Equal(got, want) {
		t.Errorf("doctor checks the rules %q; docs/redis-acl.md grants %q", got, want)
	}
	cluster := grant("cbgrpc:", true)
	if extra := cluster[len(got):]; len(extra) != 2 || extra[0].rule != "+cluster|slots" || extra[1].rule != "+command" {
		t.Errorf("doctor --cluster adds %+v; docs/redis-acl.md adds +cluster|slots +command", extra)
	}
}
