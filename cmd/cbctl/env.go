package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// env is one command's flags, output and connection.
type env struct {
	name           string
	stdout, stderr io.Writer
	getenv         func(string) string

	addr, prefix     string
	sentinel, master string
	cluster, tls     bool
	tlsCA, tlsName   string
	window           time.Duration
	buckets          int
	timeout          time.Duration
	replicas         int           // isolate, release, disable, enable
	replicaTimeout   time.Duration // likewise
	json             bool
	client           goredis.UniversalClient
	cmd              *command
	fs               *flag.FlagSet
	global           map[string]bool // the flags every command takes, for the help text
}

var errHelp = errors.New("help")

// defaultAddr is the Redis cbctl connects to when told none; a variable so
// that tests never reach a Redis of the machine's.
var defaultAddr = "127.0.0.1:6379"

// flags makes the command's flag set with the flags every command takes.
func (e *env) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("cbctl "+e.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := coordinator.DefaultPolicy()
	addr := e.getenv("CBCTL_REDIS_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&e.addr, "addr", addr, "Redis `HOST:PORT`; comma-separated seeds with --cluster")
	fs.BoolVar(&e.cluster, "cluster", false, "the Redis is a Redis Cluster")
	fs.StringVar(&e.sentinel, "sentinel", e.getenv("CBCTL_REDIS_SENTINEL"), "Sentinel `HOST:PORT`s, comma-separated, instead of --addr; with --master")
	fs.StringVar(&e.master, "master", e.getenv("CBCTL_REDIS_MASTER"), "`NAME` of the master the Sentinels monitor")
	fs.BoolVar(&e.tls, "tls", false, "connect with TLS")
	fs.StringVar(&e.tlsCA, "tls-ca", "", "PEM `FILE` of the CAs to trust (implies --tls)")
	fs.StringVar(&e.tlsName, "tls-server-name", "", "server `NAME` to verify (implies --tls)")
	fs.StringVar(&e.prefix, "prefix", cbredis.DefaultPrefix, "key `PREFIX` of the fleet's coordinator")
	fs.DurationVar(&e.window, "window", def.Window, "the fleet's Policy.Window")
	fs.IntVar(&e.buckets, "buckets", def.Buckets, "the fleet's Policy.Buckets")
	fs.DurationVar(&e.timeout, "timeout", 10*time.Second, "bound on the command (not on watch)")
	fs.BoolVar(&e.json, "json", false, "print JSON instead of a table")
	e.global = map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { e.global[f.Name] = true })
	e.fs = fs
	return fs
}

// parse parses args, letting flags and arguments mix; "--" ends the flags.
func (e *env) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := e.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				e.help()
				return nil, errHelp
			}
			return nil, usageErr("%s (see cbctl %s --help)", flagError(err), e.name)
		}
		rest := e.fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at "--" (consumed) or at the first argument.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// help is the command's help, on standard output: asked for, it is the
// output.
func (e *env) help() {
	w := e.stdout
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", strings.TrimSpace("cbctl "+e.name+" [flags] "+e.cmd.args), capitalize(e.cmd.brief))
	if more := moreHelp[e.name]; more != "" {
		fmt.Fprint(w, "\n"+more)
	}
	if len(e.global) < countFlags(e.fs) {
		fmt.Fprintf(w, "\nflags of %s:\n", e.name)
		writeFlags(w, e.fs, func(name string) bool { return !e.global[name] })
	}
	fmt.Fprint(w, "\nflags every command takes (also before the command):\n")
	writeFlags(w, e.fs, func(name string) bool { return e.global[name] })
	fmt.Fprint(w, "\n"+environment)
}

// policy is the fleet's policy as far as cbctl needs it: the window.
func (e *env) policy() (coordinator.Policy, error) {
	p := coordinator.DefaultPolicy()
	p.Window, p.Buckets = e.window, e.buckets
	if err := p.Validate(); err != nil {
		return p, usageErr("--window %v --buckets %d: %v", e.window, e.buckets, err)
	}
	return p, nil
}

// coordinator connects to Redis.
func (e *env) coordinator() (*cbredis.Coordinator, error) {
	if strings.ContainsAny(e.prefix, "{}") {
		return nil, usageErr("--prefix %q: a prefix holds no brace", e.prefix)
	}
	sentinel, err := e.viaSentinel()
	if err != nil {
		return nil, err
	}
	if !sentinel && !e.given("addr") && e.getenv("CBCTL_REDIS_ADDR") == "" {
		// On standard error: scripts read standard output.
		fmt.Fprintf(e.stderr, "cbctl: no --addr or CBCTL_REDIS_ADDR given: using the default %s\n", e.addr)
	}
	var tc *tls.Config
	if e.tls || e.tlsCA != "" || e.tlsName != "" {
		tc = &tls.Config{ServerName: e.tlsName, MinVersion: tls.VersionTLS12}
		if e.tlsCA != "" {
			pem, err := os.ReadFile(e.tlsCA)
			if err != nil {
				return nil, usageErr("--tls-ca: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, usageErr("--tls-ca %s: no PEM certificate in it", e.tlsCA)
			}
		}
	}
	user, pass := e.getenv("CBCTL_REDIS_USERNAME"), e.getenv("CBCTL_REDIS_PASSWORD")
	addrs := strings.Split(e.addr, ",")
	switch {
	case sentinel:
		e.client = goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: e.master, SentinelAddrs: strings.Split(e.sentinel, ","),
			Username: user, Password: pass, TLSConfig: tc, ContextTimeoutEnabled: true,
		})
	case e.cluster:
		e.client = goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: addrs, Username: user, Password: pass, TLSConfig: tc, ContextTimeoutEnabled: true,
		})
	case len(addrs) != 1:
		return nil, usageErr("--addr %q: one address, or --cluster for seeds", e.addr)
	default:
		e.client = goredis.NewClient(&goredis.Options{
			Addr: e.addr, Username: user, Password: pass, TLSConfig: tc, ContextTimeoutEnabled: true,
		})
	}
	return cbredis.New(e.client, cbredis.WithPrefix(e.prefix),
		cbredis.WithReplicas(e.replicas), cbredis.WithReplicaTimeout(e.replicaTimeout)), nil
}

// viaSentinel reports whether to find the master through Sentinels: when
// --sentinel or $CBCTL_REDIS_SENTINEL is set, unless --addr is given. An
// explicit flag beats the environment, as it does for --addr.
func (e *env) viaSentinel() (bool, error) {
	origin := func(flag, env string) string {
		if e.given(flag) {
			return "--" + flag
		}
		return "$" + env
	}
	switch {
	case e.sentinel == "" || (e.given("addr") && !e.given("sentinel")):
		if e.given("master") {
			return false, usageErr("--master %q: it names a master the Sentinels monitor; give --sentinel too", e.master)
		}
		return false, nil
	case e.given("addr"):
		return false, usageErr("--addr and --sentinel: give one of them")
	case e.cluster:
		return false, usageErr("--cluster and %s: Sentinel serves a master and its replicas, not a cluster; give one of them", origin("sentinel", "CBCTL_REDIS_SENTINEL"))
	case e.master == "":
		return false, usageErr("%s %q: give --master NAME (or $CBCTL_REDIS_MASTER), the master the Sentinels monitor", origin("sentinel", "CBCTL_REDIS_SENTINEL"), e.sentinel)
	}
	return true, nil
}

// given reports whether the flag name is on the command line.
func (e *env) given(name string) bool {
	set := false
	e.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// by is who acts, for the note.
func (e *env) defaultBy() string {
	if by := e.getenv("CBCTL_BY"); by != "" {
		return by
	}
	return e.getenv("USER")
}
