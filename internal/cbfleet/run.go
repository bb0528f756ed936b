package cbfleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// Run is one replica: it connects, reports "ready", and then follows the
// commands on in until "quit" or the end of in. It returns an error only
// when it cannot start.
func Run(cfg Config, in io.Reader, out io.Writer) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	var coord coordinator.Coordinator
	if rdb := cfg.client(); rdb == nil {
		coord = memory.New()
	} else {
		defer rdb.Close()
		var opts []cbredis.Option
		if cfg.Prefix != "" {
			opts = append(opts, cbredis.WithPrefix(cfg.Prefix))
		}
		coord = cbredis.New(rdb, opts...)
		warmUp(coord, cfg)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	b, err := cbgrpc.New(coord, append(cfg.options(), cbgrpc.WithMeterProvider(mp))...)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(cfg.Target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()),
	)
	if err != nil {
		b.Close()
		return err
	}
	defer cc.Close()

	r := &replica{
		cfg:    cfg,
		b:      b,
		client: testgrpc.NewTestServiceClient(cc),
		reader: reader,
		out:    json.NewEncoder(out),
	}
	r.cond = sync.NewCond(&r.mu)
	r.newPhase("start")
	r.report("ready", false, "")

	var callers sync.WaitGroup
	for i := range cfg.Concurrency {
		callers.Add(1)
		go func() { defer callers.Done(); r.caller(i) }()
	}
	stopTicks := make(chan struct{})
	ticksDone := make(chan struct{})
	go func() {
		defer close(ticksDone)
		t := time.NewTicker(cfg.Report)
		defer t.Stop()
		// The policies are looked at every millisecond, and a change is
		// reported at once: a test measures how soon an override applies.
		look := time.NewTicker(time.Millisecond)
		defer look.Stop()
		last := r.inForce()
		for {
			select {
			case <-t.C:
				r.report("tick", false, "")
			case <-look.C:
				if now := r.inForce(); !slices.Equal(now, last) {
					last = now
					r.report("policy", false, "")
				}
			case <-stopTicks:
				return
			}
		}
	}()

	r.follow(in)

	r.setMode(func() { r.quit = true })
	callers.Wait()
	close(stopTicks)
	<-ticksDone
	start := time.Now()
	closeErr := b.Close()
	r.mu.Lock()
	r.closeMS = time.Since(start).Milliseconds()
	if closeErr != nil {
		r.closeErr = closeErr.Error()
	}
	r.mu.Unlock()
	r.report("closed", true, "")
	return nil
}

// warmUp dials Redis and has it load a script before the replica says it
// is ready. A replica's first coordinator call otherwise pays for the dial
// and the script's first EVAL, which on a loaded machine can exceed the
// coordinator timeout and start the replica in a back-off (FailOpen:
// unprotected calls) before a test has broken anything. Errors are left
// for the calls to meet.
func warmUp(coord coordinator.Coordinator, cfg Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range cfg.Methods {
		coord.Snapshot(ctx, cbgrpc.ScopeByMethod(ctx, cfg.Target, "/grpc.testing.TestService/"+m), cfg.Policy)
	}
}

// replica holds the state of a running Run.
type replica struct {
	cfg    Config
	b      *cbgrpc.Breaker
	client testgrpc.TestServiceClient
	reader *sdkmetric.ManualReader

	outMu sync.Mutex
	out   *json.Encoder

	mu       sync.Mutex
	cond     *sync.Cond
	running  bool  // "run"
	budget   int64 // calls left of "calls N"
	quit     bool
	inFlight int64

	phase    string
	started  time.Time
	counts   map[string]*MethodCount
	latency  []time.Duration
	firstErr map[string]string // by kind: the first message, for the log
	closeMS  int64
	closeErr string
}

func (r *replica) follow(in io.Reader) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch cmd {
		case "run":
			r.setMode(func() { r.running = true })
		case "calls":
			n, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || n < 0 {
				r.note("command", fmt.Sprintf("calls %q: want a count", arg))
				continue
			}
			r.setMode(func() { r.running, r.budget = false, r.budget+n })
		case "hold":
			r.setMode(func() { r.running, r.budget = false, 0 })
		case "phase":
			r.report("phase", true, arg)
			r.report("tick", false, "")
		case "quit":
			return
		case "":
		default:
			r.note("command", fmt.Sprintf("unknown command %q", cmd))
		}
	}
}

func (r *replica) setMode(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	r.cond.Broadcast()
}

// next waits until the caller may make a call; false when it must stop.
func (r *replica) next() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		switch {
		case r.quit:
			return false
		case r.running:
		case r.budget > 0:
			r.budget--
		default:
			r.cond.Wait()
			continue
		}
		r.inFlight++
		return true
	}
}

func (r *replica) caller(i int) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), IDKey, strconv.Itoa(r.cfg.ID))
	for n := i; r.next(); n++ {
		method := r.cfg.Methods[n%len(r.cfg.Methods)]
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		start := time.Now()
		var err error
		switch method {
		case EmptyCall:
			_, err = r.client.EmptyCall(cctx, &testpb.Empty{})
		case UnaryCall:
			_, err = r.client.UnaryCall(cctx, &testpb.SimpleRequest{})
		}
		d := time.Since(start)
		cancel()
		r.ended(method, d, err)
		if r.cfg.RejectPause > 0 && errors.Is(err, cbgrpc.ErrOpen) {
			time.Sleep(r.cfg.RejectPause)
		}
	}
}

func (r *replica) ended(method string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	m := r.counts[method]
	if m == nil {
		m = &MethodCount{}
		r.counts[method] = m
	}
	m.Calls++
	switch {
	case err == nil:
		m.OK++
		m.Streak = 0
	case errors.Is(err, cbgrpc.ErrOpen):
		m.Rejected++
		m.Streak++
		r.noteLocked("rejected", err.Error())
	default:
		m.Errors++
		m.Streak = 0
		r.noteLocked("error", err.Error())
	}
	r.latency = append(r.latency, d)
}

func (r *replica) note(kind, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(kind, msg)
}

func (r *replica) noteLocked(kind, msg string) {
	if _, ok := r.firstErr[kind]; !ok {
		r.firstErr[kind] = msg
	}
}

func (r *replica) newPhase(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.newPhaseLocked(name)
}

func (r *replica) newPhaseLocked(name string) {
	r.phase, r.started = name, time.Now()
	r.counts = make(map[string]*MethodCount)
	r.latency = nil
	r.firstErr = make(map[string]string)
}

// report writes one Report; percentiles adds the latency percentiles of
// the phase. A next phase, when named, starts as the report is taken, so
// that no call is lost between two phases.
func (r *replica) report(event string, percentiles bool, next string) {
	rep := Report{Event: event, ID: r.cfg.ID, Methods: make(map[string]*MethodCount), At: time.Now().UnixMilli()}
	rep.Policies = r.policies()
	r.metrics(&rep)
	rep.Goroutines = runtime.NumGoroutine()

	r.mu.Lock()
	rep.Phase = r.phase
	rep.MS = time.Since(r.started).Milliseconds()
	for name, m := range r.counts {
		c := *m
		rep.Methods[name] = &c
		rep.Calls += c.Calls
		rep.OK += c.OK
		rep.Rejected += c.Rejected
		rep.Errors += c.Errors
	}
	rep.InFlight = r.inFlight
	rep.Idle = r.inFlight == 0 && !r.running && r.budget == 0
	var lat []time.Duration
	if percentiles {
		lat = slices.Clone(r.latency)
	} else {
		for _, d := range r.latency {
			rep.MaxUS = max(rep.MaxUS, d.Microseconds())
		}
	}
	var msgs []string
	for kind, msg := range r.firstErr {
		msgs = append(msgs, kind+": "+msg)
	}
	slices.Sort(msgs)
	rep.Err = strings.Join(msgs, "; ")
	rep.CloseMS, rep.CloseErr = r.closeMS, r.closeErr
	if next != "" {
		r.newPhaseLocked(next)
	}
	r.mu.Unlock()

	if len(lat) > 0 {
		slices.Sort(lat)
		rep.MaxUS = lat[len(lat)-1].Microseconds()
		rep.P50US = lat[len(lat)/2].Microseconds()
		rep.P99US = lat[len(lat)*99/100].Microseconds()
	}

	r.outMu.Lock()
	defer r.outMu.Unlock()
	r.out.Encode(rep)
}

// policy is what a Breaker runs a scope on.
type policy struct {
	p   coordinator.Policy
	src coordinator.PolicySource
}

// inForce is what the Breaker runs each method's scope on, in the order
// of cfg.Methods.
func (r *replica) inForce() []policy {
	in := make([]policy, len(r.cfg.Methods))
	for i, method := range r.cfg.Methods {
		in[i].p, in[i].src = r.b.Policy(cbgrpc.ScopeByMethod(context.Background(), r.cfg.Target, "/grpc.testing.TestService/"+method))
	}
	return in
}

// policies are inForce as a report gives them: by method, "fingerprint
// source".
func (r *replica) policies() map[string]string {
	m := make(map[string]string, len(r.cfg.Methods))
	for i, in := range r.inForce() {
		m[r.cfg.Methods[i]] = in.p.Fingerprint() + " " + in.src.String()
	}
	return m
}

// metrics reads the Breaker's counters into rep.
func (r *replica) metrics(rep *Report) {
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		rep.Err = "metrics: " + err.Error()
		return
	}
	rep.DroppedBy = make(map[string]int64)
	rep.Decisions = make(map[string]int64)
	rep.CoordErrsBy = make(map[string]int64)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				str := func(k string) string { v, _ := dp.Attributes.Value(attribute.Key(k)); return v.AsString() }
				switch m.Name {
				case "cbgrpc.outcomes.dropped":
					rep.Dropped += dp.Value
					rep.DroppedBy[str("cbgrpc.reason")] += dp.Value
				case "cbgrpc.decisions":
					rep.Decisions[str("cbgrpc.verdict")+"/"+str("cbgrpc.decided_by")] += dp.Value
				case "cbgrpc.feed.losses":
					rep.FeedLosses += dp.Value
				case "cbgrpc.coordinator.errors":
					rep.CoordErrs += dp.Value
					rep.CoordErrsBy[str("cbgrpc.operation")+"/"+str("error.type")] += dp.Value
				}
			}
		}
	}
}
