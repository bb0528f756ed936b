package cbgrpc

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// mode says how a [testCoordinator] answers.
type mode int32

const (
	modeOK    mode = iota
	modeFail       // every operation fails at once with a transport error
	modeBlock      // every operation blocks until released, ignoring its context (a paused Redis with a default go-redis client)
)

var errTransport = status.Error(codes.Unavailable, "test coordinator: connection refused")

// testCoordinator is the one fake coordinator of the root tests: it wraps
// a coordinator, counting operations, failing or blocking on demand and
// running the hooks a test sets. Itself it offers the Breaker no optional
// interface; its faces below offer what they say (TestTestCoordinatorFaces).
type testCoordinator struct {
	coordinator.Coordinator
	mode    atomic.Int32
	release chan struct{}
	// failAdmits and failSends fail this many Admits, or Records and
	// Settles, before mode applies (apart, so that a call's asynchronous
	// Record cannot use up a failure meant for the next call's Admit);
	// failRecords fails every Record and Settle whatever the mode.
	failAdmits, failSends atomic.Int32
	failRecords           atomic.Bool
	once                  sync.Once
	// forgetful keeps no outcome, claim or batch ID: it only counts.
	forgetful bool

	admits, records, settles atomic.Int64
	recorded, settled        atomic.Int64 // outcomes sent to the wrapped coordinator
	delivered                atomic.Int64 // outcomes of Records it answered without error
	claims                   sync.Map     // claim -> admissions with it
	batchIDs                 sync.Map     // batch ID -> Records with it
	snapshots                atomic.Int64
	inflight, maxInflight    atomic.Int64 // concurrent Records
	recordHook               func()
	// answered runs with the wrapped coordinator's answer to a Record, a
	// Settle or a Push (op "record", "settle", "push"): a slow network's.
	answered func(op string, res coordinator.Result)
	// admitted, when set, may answer an Admit in the coordinator's stead
	// (ok): a policy refused, a scope's state corrupt, a panic.
	admitted func(q coordinator.AdmitRequest) (d coordinator.Decision, err error, ok bool)
	// pushing runs before a Push, failing it with its error: a Push that waits.
	pushing func(ctx context.Context) error
	// checkHook is the Check of withCheck; likeRedis sets Redis's.
	checkHook func(ctx context.Context) error
	// heard, when set, runs with every transition a watch delivers.
	heard func(coordinator.Transition)

	mu  sync.Mutex
	got []coordinator.Outcome // every outcome delivered by Record or Settle

	// The feed, when a face offers it: silent makes every watch drop what
	// it hears without a word (a feed connected to a demoted master);
	// refuse fails every Watch. The watches hide coordinator.PolicyWatch,
	// as a careless wrapper's would, unless plainWatches hands out the
	// wrapped coordinator's as they are.
	feedMu         sync.Mutex
	watches        []coordinator.Watch // open, until closeWatches or breakFeed
	opened         atomic.Int64
	silent, refuse atomic.Bool
	plainWatches   bool
}

func (c *testCoordinator) outcomes() []coordinator.Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]coordinator.Outcome(nil), c.got...)
}

func newTestCoordinator(t testing.TB, c coordinator.Coordinator) *testCoordinator {
	tc := &testCoordinator{Coordinator: c, release: make(chan struct{}),
		answered: func(string, coordinator.Result) {}, pushing: func(context.Context) error { return nil }}
	t.Cleanup(tc.unblock)
	return tc
}

func (c *testCoordinator) set(m mode) { c.mode.Store(int32(m)) }
func (c *testCoordinator) unblock()   { c.once.Do(func() { close(c.release) }) }

func (c *testCoordinator) gate(failNext *atomic.Int32) error {
	for {
		n := failNext.Load()
		if n <= 0 {
			break
		}
		if failNext.CompareAndSwap(n, n-1) {
			return errTransport
		}
	}
	switch mode(c.mode.Load()) {
	case modeFail:
		return errTransport
	case modeBlock:
		<-c.release
		return errTransport
	}
	return nil
}

func (c *testCoordinator) Admit(ctx context.Context, q coordinator.AdmitRequest) (coordinator.Decision, error) {
	c.admits.Add(1)
	if !c.forgetful {
		n, _ := c.claims.LoadOrStore(q.Claim, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if c.admitted != nil {
		if d, err, ok := c.admitted(q); ok {
			return d, err
		}
	}
	if err := c.gate(&c.failAdmits); err != nil {
		return coordinator.Decision{}, err
	}
	return c.Coordinator.Admit(ctx, q)
}

func (c *testCoordinator) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	c.snapshots.Add(1)
	return c.Coordinator.Snapshot(ctx, scope, p)
}

func (c *testCoordinator) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	c.records.Add(1)
	if !c.forgetful {
		n, _ := c.batchIDs.LoadOrStore(q.BatchID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	in := c.inflight.Add(1)
	defer c.inflight.Add(-1)
	for {
		m := c.maxInflight.Load()
		if in <= m || c.maxInflight.CompareAndSwap(m, in) {
			break
		}
	}
	if c.recordHook != nil {
		c.recordHook()
	}
	if c.failRecords.Load() {
		return coordinator.Result{}, errTransport
	}
	if err := c.gate(&c.failSends); err != nil {
		return coordinator.Result{}, err
	}
	c.recorded.Add(int64(len(q.Outcomes)))
	if !c.forgetful {
		c.mu.Lock()
		c.got = append(c.got, q.Outcomes...)
		c.mu.Unlock()
	}
	res, err := c.Coordinator.Record(ctx, q)
	if err == nil {
		c.delivered.Add(int64(len(q.Outcomes)))
	}
	c.answered("record", res)
	return res, err
}

func (c *testCoordinator) Settle(ctx context.Context, q coordinator.SettleRequest) (coordinator.Result, error) {
	c.settles.Add(1)
	if c.failRecords.Load() {
		return coordinator.Result{}, errTransport
	}
	if err := c.gate(&c.failSends); err != nil {
		return coordinator.Result{}, err
	}
	c.settled.Add(1)
	if !c.forgetful {
		c.mu.Lock()
		c.got = append(c.got, q.Outcome)
		c.mu.Unlock()
	}
	res, err := c.Coordinator.Settle(ctx, q)
	c.answered("settle", res)
	return res, err
}

// fed offers the Breaker the feed (coordinator.Watcher) and nothing else.
type fed struct{ *testCoordinator }

func (c *testCoordinator) withFeed() fed { return fed{c} }
func (c fed) Watch(ctx context.Context) (coordinator.Watch, error) {
	c.feedMu.Lock()
	defer c.feedMu.Unlock()
	if c.refuse.Load() {
		return nil, errTransport
	}
	w, err := c.Coordinator.(coordinator.Watcher).Watch(ctx)
	if err == nil {
		c.watches = append(c.watches, w)
		c.opened.Add(1)
		if !c.plainWatches {
			w = &testWatch{Watch: w, c: c.testCoordinator}
		}
	}
	return w, err
}

type testWatch struct {
	coordinator.Watch
	c *testCoordinator
}

func (w *testWatch) Next(ctx context.Context) (coordinator.Transition, error) {
	t, err := w.Watch.Next(ctx)
	for err == nil && w.c.silent.Load() {
		t, err = w.Watch.Next(ctx)
	}
	if err == nil && w.c.heard != nil {
		w.c.heard(t)
	}
	return t, err
}

// closeWatches ends every open watch: the feed connects again.
func (c *testCoordinator) closeWatches() {
	c.feedMu.Lock()
	defer c.feedMu.Unlock()
	for _, w := range c.watches {
		w.Close()
	}
	c.watches = nil
}

// breakFeed closes every watch and refuses new ones: a broken connection.
func (c *testCoordinator) breakFeed() {
	c.refuse.Store(true)
	c.closeWatches()
}

// whole offers every optional interface of the memory coordinator: the
// feed and Push through the fake, the rest straight from the wrapped one.
type whole struct {
	fed
	passedOn
}

type passedOn interface {
	coordinator.Controller
	coordinator.Lister
	coordinator.Bounded
	coordinator.CauseKeeper
}

func (c *testCoordinator) whole() whole { return whole{fed{c}, c.Coordinator.(passedOn)} }
func (c whole) Push(ctx context.Context, q coordinator.PushRequest) (coordinator.Result, error) {
	if err := c.pushing(ctx); err != nil {
		return coordinator.Result{}, err
	}
	res, err := c.Coordinator.(coordinator.Pusher).Push(ctx, q)
	c.answered("push", res)
	return res, err
}

// checked offers what whole does and coordinator.Checker: checkHook.
type checked struct{ whole }

func (c *testCoordinator) withCheck() checked     { return checked{c.whole()} }
func (c checked) Check(ctx context.Context) error { return c.checkHook(ctx) }

// redisLike offers every optional interface of the Redis coordinator: what
// checked does, Redis's Check, and its ErrorKinds.
type redisLike struct {
	checked
	coordinator.ErrorKinds
}

func (c *testCoordinator) likeRedis() redisLike {
	c.checkHook = c.Coordinator.(coordinator.Checker).Check
	return redisLike{c.withCheck(), c.Coordinator.(coordinator.ErrorKinds)}
}

// TestTestCoordinatorFaces: each face offers the Breaker what it says, no more.
func TestTestCoordinatorFaces(t *testing.T) {
	tc := newTestCoordinator(t, cbredis.New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}))) // never dialled
	const memoryHas = "Watcher Pusher Controller Lister Bounded CauseKeeper"
	for face, want := range map[coordinator.Coordinator]string{
		tc: "", tc.withFeed(): "Watcher", tc.whole(): memoryHas,
		tc.withCheck(): memoryHas + " Checker", tc.likeRedis(): memoryHas + " Checker ErrorKinds",
	} {
		var has []string
		for _, i := range []any{(*coordinator.Watcher)(nil), (*coordinator.Pusher)(nil), (*coordinator.Controller)(nil), (*coordinator.Lister)(nil),
			(*coordinator.Bounded)(nil), (*coordinator.CauseKeeper)(nil), (*coordinator.Checker)(nil), (*coordinator.ErrorKinds)(nil)} {
			if it := reflect.TypeOf(i).Elem(); reflect.TypeOf(face).Implements(it) {
				has = append(has, it.Name())
			}
		}
		if got := strings.Join(has, " "); got != want {
			t.Errorf("%T offers %q; want %q", face, got, want)
		}
	}
}
