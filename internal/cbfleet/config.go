package cbfleet

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Config is what one replica does. The zero values of the durations and
// knobs mean the library's defaults.
type Config struct {
	ID    int    // sent with every call as metadata cbfleet-id
	Redis string // Redis address; empty (and no Sentinel or Cluster): a coordinator of this process alone (memory)
	// Sentinel (with Master) reaches Redis through a failover client;
	// Cluster through a cluster client. At most one of Redis, Sentinel
	// and Cluster is set.
	Sentinel    []string
	Master      string
	Cluster     []string
	Prefix      string   // Redis key prefix; empty: the coordinator's default
	Target      string   // gRPC server address
	Methods     []string // TestService methods the callers take turns on: "EmptyCall", "UnaryCall"
	Concurrency int      // callers
	Report      time.Duration
	CallTimeout time.Duration
	// RejectPause is how long a caller waits after a rejected call, as a
	// real client would rather than spin; zero: it calls again at once.
	RejectPause time.Duration

	Policy             coordinator.Policy
	FailClosed         bool
	CoordinatorTimeout time.Duration
	CoordinatorBackoff time.Duration
	RecordInterval     time.Duration
	// NoAdmissionCache asks the coordinator on every admission
	// (cbgrpc.WithAdmissionCache(0)) instead of the library's default.
	NoAdmissionCache bool
}

// Methods the callers can make.
const (
	EmptyCall = "EmptyCall"
	UnaryCall = "UnaryCall"
)

// Metadata key that carries Config.ID on every call.
const IDKey = "cbfleet-id"

func (c *Config) setDefaults() {
	if len(c.Methods) == 0 {
		c.Methods = []string{EmptyCall}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.Report <= 0 {
		c.Report = 50 * time.Millisecond
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.Policy == (coordinator.Policy{}) {
		c.Policy = coordinator.DefaultPolicy()
	}
}

func (c *Config) validate() error {
	if c.Target == "" {
		return errors.New("cbfleet: -target is required")
	}
	set := 0
	for _, on := range []bool{c.Redis != "", len(c.Sentinel) > 0, len(c.Cluster) > 0} {
		if on {
			set++
		}
	}
	if set > 1 {
		return errors.New("cbfleet: -redis, -sentinel and -cluster exclude each other")
	}
	if (len(c.Sentinel) > 0) != (c.Master != "") {
		return errors.New("cbfleet: -sentinel and -master go together")
	}
	for _, m := range c.Methods {
		if m != EmptyCall && m != UnaryCall {
			return fmt.Errorf("cbfleet: -methods: unknown method %q; use %s or %s", m, EmptyCall, UnaryCall)
		}
	}
	return nil
}

// options are the Breaker options c asks for.
func (c *Config) options() []cbgrpc.Option {
	opts := []cbgrpc.Option{cbgrpc.WithPolicy(c.Policy)}
	if c.FailClosed {
		opts = append(opts, cbgrpc.WithCoordinatorFailure(cbgrpc.FailClosed))
	}
	if c.CoordinatorTimeout > 0 {
		opts = append(opts, cbgrpc.WithCoordinatorTimeout(c.CoordinatorTimeout))
	}
	if c.CoordinatorBackoff > 0 {
		opts = append(opts, cbgrpc.WithCoordinatorBackoff(c.CoordinatorBackoff))
	}
	if c.RecordInterval > 0 {
		opts = append(opts, cbgrpc.WithRecordInterval(c.RecordInterval))
	}
	if c.NoAdmissionCache {
		opts = append(opts, cbgrpc.WithAdmissionCache(0))
	}
	return opts
}

// Args returns the command line that makes [ParseFlags] return c.
func (c Config) Args() []string {
	c.setDefaults()
	p := c.Policy
	args := []string{
		"-id", strconv.Itoa(c.ID),
		"-redis", c.Redis,
		"-sentinel", strings.Join(c.Sentinel, ","),
		"-master", c.Master,
		"-cluster", strings.Join(c.Cluster, ","),
		"-prefix", c.Prefix,
		"-target", c.Target,
		"-methods", strings.Join(c.Methods, ","),
		"-concurrency", strconv.Itoa(c.Concurrency),
		"-report", c.Report.String(),
		"-call-timeout", c.CallTimeout.String(),
		"-reject-pause", c.RejectPause.String(),
		"-fail-closed=" + strconv.FormatBool(c.FailClosed),
		"-coordinator-timeout", c.CoordinatorTimeout.String(),
		"-coordinator-backoff", c.CoordinatorBackoff.String(),
		"-record-interval", c.RecordInterval.String(),
		"-no-admission-cache=" + strconv.FormatBool(c.NoAdmissionCache),
		"-window", p.Window.String(),
		"-buckets", strconv.Itoa(p.Buckets),
		"-min-calls", strconv.Itoa(p.MinCalls),
		"-failure-ratio", strconv.FormatFloat(p.FailureRatio, 'g', -1, 64),
		"-consecutive-failures", strconv.Itoa(p.ConsecutiveFailures),
		"-slow-call-duration", p.SlowCallDuration.String(),
		"-slow-call-ratio", strconv.FormatFloat(p.SlowCallRatio, 'g', -1, 64),
		"-open-for", p.OpenFor.String(),
		"-max-open-for", p.MaxOpenFor.String(),
		"-probes", strconv.Itoa(p.Probes),
		"-probe-lease", p.ProbeLease.String(),
		"-probe-successes", strconv.Itoa(p.ProbeSuccesses),
	}
	return args
}

// ParseFlags reads a Config from a command line.
func ParseFlags(name string, args []string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	d := coordinator.DefaultPolicy()
	p := &c.Policy
	var methods, sentinel, cluster string
	fs.IntVar(&c.ID, "id", 0, "replica number, sent with every call as metadata "+IDKey)
	fs.StringVar(&c.Redis, "redis", "", "Redis address; empty: a coordinator of this process alone")
	fs.StringVar(&sentinel, "sentinel", "", "comma-separated Sentinel addresses (with -master)")
	fs.StringVar(&c.Master, "master", "", "the Sentinel master name")
	fs.StringVar(&cluster, "cluster", "", "comma-separated Redis Cluster addresses")
	fs.StringVar(&c.Prefix, "prefix", "", "Redis key prefix (default the coordinator's)")
	fs.StringVar(&c.Target, "target", "", "gRPC server address (grpc.testing.TestService)")
	fs.StringVar(&methods, "methods", EmptyCall, "comma-separated TestService methods the callers take turns on")
	fs.IntVar(&c.Concurrency, "concurrency", 1, "concurrent callers")
	fs.DurationVar(&c.Report, "report", 50*time.Millisecond, "interval of tick reports")
	fs.DurationVar(&c.CallTimeout, "call-timeout", 5*time.Second, "deadline of each call")
	fs.DurationVar(&c.RejectPause, "reject-pause", 0, "pause of a caller after a rejected call")
	fs.BoolVar(&c.FailClosed, "fail-closed", false, "reject calls of scopes not known open while Redis is unreachable")
	fs.DurationVar(&c.CoordinatorTimeout, "coordinator-timeout", 0, "cbgrpc.WithCoordinatorTimeout (0: default)")
	fs.DurationVar(&c.CoordinatorBackoff, "coordinator-backoff", 0, "cbgrpc.WithCoordinatorBackoff (0: default)")
	fs.DurationVar(&c.RecordInterval, "record-interval", 0, "cbgrpc.WithRecordInterval (0: default)")
	fs.BoolVar(&c.NoAdmissionCache, "no-admission-cache", false, "ask the coordinator on every admission (cbgrpc.WithAdmissionCache(0))")
	fs.DurationVar(&p.Window, "window", d.Window, "policy Window")
	fs.IntVar(&p.Buckets, "buckets", d.Buckets, "policy Buckets")
	fs.IntVar(&p.MinCalls, "min-calls", d.MinCalls, "policy MinCalls")
	fs.Float64Var(&p.FailureRatio, "failure-ratio", d.FailureRatio, "policy FailureRatio")
	fs.IntVar(&p.ConsecutiveFailures, "consecutive-failures", d.ConsecutiveFailures, "policy ConsecutiveFailures")
	fs.DurationVar(&p.SlowCallDuration, "slow-call-duration", d.SlowCallDuration, "policy SlowCallDuration")
	fs.Float64Var(&p.SlowCallRatio, "slow-call-ratio", d.SlowCallRatio, "policy SlowCallRatio")
	fs.DurationVar(&p.OpenFor, "open-for", d.OpenFor, "policy OpenFor")
	fs.DurationVar(&p.MaxOpenFor, "max-open-for", d.MaxOpenFor, "policy MaxOpenFor")
	fs.IntVar(&p.Probes, "probes", d.Probes, "policy Probes")
	fs.DurationVar(&p.ProbeLease, "probe-lease", d.ProbeLease, "policy ProbeLease")
	fs.IntVar(&p.ProbeSuccesses, "probe-successes", d.ProbeSuccesses, "policy ProbeSuccesses")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("cbfleet: unexpected arguments %q", fs.Args())
	}
	c.Methods = strings.Split(methods, ",")
	c.Sentinel, c.Cluster = list(sentinel), list(cluster)
	c.setDefaults()
	return c, c.validate()
}

// list splits a comma-separated flag; empty is none.
func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// client is the go-redis client the Config asks for, with default options
// as a user's would be (no ContextTimeoutEnabled, go-redis's own timeouts
// and retries); nil when the replica runs on a coordinator of its own.
func (c *Config) client() goredis.UniversalClient {
	switch {
	case c.Redis != "":
		return goredis.NewClient(&goredis.Options{Addr: c.Redis})
	case len(c.Sentinel) > 0:
		return goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: c.Master, SentinelAddrs: c.Sentinel})
	case len(c.Cluster) > 0:
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Cluster})
	}
	return nil
}
