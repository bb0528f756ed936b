package cbgrpc

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// knowledge is what this process knows of each scope it protects: one
// table, fed by every answer of the coordinator (Admit, Record, Settle, an
// operator's command through the Breaker, the transition feed) through
// learn, and read by every decision: an admission answered locally (the
// admission cache) and one decided while the coordinator is unreachable.
//
// Answers are ordered by generation: one about an older generation never
// overrides a newer one, so a Record answer computed before a trip
// ("closed, g") cannot erase "open, g'" learned since. Within one
// generation, open comes before half-open, and disabled before closed
// (enable keeps the generation).
//
// An answer serves admissions only if the feed connection that is live
// now followed its scope before the question was asked: a transition made
// in between could otherwise go unheard. Answers of a feed connection that
// has died still serve outage decisions.
//
// A scope with no call for a whole window, and no open period known to be
// running, is forgotten: the table, and the feed's subscriptions with it,
// stay bounded by the scopes in use.
type knowledge struct {
	maxAge time.Duration // how long a closed answer serves admissions; 0: never
	idle   time.Duration // a scope with no call for this long is forgotten

	// live is the number of the feed connection that is up, 0 while none
	// is; the feed numbers its connections from 1.
	live atomic.Uint64

	mu     sync.RWMutex
	scopes map[string]*known
	// index holds the rows of scopes too, for use to read without a lock:
	// every protected call reads it, and rows come and go rarely.
	index sync.Map // scope → *known
	// follow and unfollow are the feed's work: scopes to follow on the
	// live connection, and scopes it follows that were forgotten.
	follow   map[string]struct{}
	unfollow []string
	wake     chan struct{} // cap 1: the feed has work

	// The shared policy (override.go): base is what every scope without
	// an override of its own runs on, the code's policy under the fleet
	// default; stale are the scopes whose override the coordinator says
	// is another than the one they run on, for sharing to read.
	base       atomic.Pointer[inForce]
	stale      map[string]struct{}
	policyWake chan struct{} // cap 1: sharing has work
}

// known is one scope's row of the table.
type known struct {
	fact // guarded by knowledge.mu
	// now is a copy of fact, stored after each change (publish), for
	// admissions to read without a lock; nil: nothing learned yet.
	now      atomic.Pointer[fact]
	followed uint64 // the feed connection that follows the scope; guarded by knowledge.mu
	// used is when a call last marked the scope used (knowledge.usedAt,
	// coarse); 0: never; forgotten once it is dropped from the table.
	used atomic.Int64
	// heard: the scope's first outcome went to the coordinator at once,
	// so that it hears this replica soon (introduce); guarded by
	// knowledge.mu.
	heard bool
	// run is this replica's run of failed calls of the scope, and
	// verdict, once the run is long enough, the coordinator's answer its
	// calls wait for (verdict.go).
	run     atomic.Int64
	verdict atomic.Pointer[verdict]
	// stalls watches the scope's calls in flight (stall.go); nil until
	// one is watched.
	stalls atomic.Pointer[stallWatch]
	// pushed is the highest generation of the scope's calls for which a
	// server's pushback reached the coordinator (pushback.go): the rest
	// of a burst has nothing left to change.
	pushed atomic.Uint64
	// confirmed is the highest generation the coordinator's own answers
	// gave, what this replica tells it it has seen (begin): one only the
	// feed said proves nothing; guarded by knowledge.mu.
	confirmed uint64
}

// fact is what the coordinator last said about a scope.
type fact struct {
	state coordinator.State
	gen   uint64 // 0: nothing learned yet
	// until is when an open period or an isolation ends, local time:
	// until then the scope is rejected without asking. An isolation until
	// released is taken for maxAge at a time.
	until   instant.Time
	checked instant.Time // when the coordinator said so; zero once suspect
	trust   uint64       // the feed connection under which it may answer admissions
	// rampEnd is when the ramp after a recovery ends, local time; zero
	// when there is none (see ramp.go).
	rampEnd instant.Time
	// window is the fleet's window of generation gen as the last Record
	// that counted said it, for adaptive throttling (throttle.go); answers
	// that say nothing of it keep it within the generation.
	window window
	// policy is what the scope runs on once its override was read; nil:
	// knowledge.base. Answers leave it as it is: sharing sets it.
	policy *inForce
	// outlier is what the coordinator said of this replica as an outlier
	// of the scope (outlier.go): only the answers to its Records say it.
	outlier outlierFact
	// cause is the span that recorded the transition into state in
	// generation gen, which rejections link to (cause.go); the zero one
	// while none is known.
	cause trace.SpanContext
	// hintUntil, when not zero, says the fact is the feed's word alone,
	// believed until then (learn); the coordinator's answers have none.
	hintUntil instant.Time
}

// admitsAll reports whether a state lets every call through: closed, or
// disabled by an operator.
func admitsAll(s coordinator.State) bool {
	return s == coordinator.StateClosed || s == coordinator.StateDisabled
}

// newKnowledge returns an empty table. maxAge 0 means there is no feed:
// nothing is followed, and nothing answers admissions.
func newKnowledge(maxAge, idle time.Duration, code coordinator.Policy) *knowledge {
	k := &knowledge{maxAge: maxAge, idle: idle, scopes: make(map[string]*known),
		follow: make(map[string]struct{}), wake: make(chan struct{}, 1),
		stale: make(map[string]struct{}), policyWake: make(chan struct{}, 1)}
	k.base.Store(&inForce{p: code, src: coordinator.SourceCode})
	return k
}

// use marks a call of scope at now and returns what is known of it, and
// its row. It is on every protected call's path: for a scope the table
// holds, no lock, no allocation, and no shared write but the coarse mark
// of use. The fact returned is not to be changed.
func (k *knowledge) use(scope string, now instant.Time) (*fact, *known) {
	if v, ok := k.index.Load(scope); ok {
		if e := v.(*known); k.touch(e, now) {
			return e.current(), e
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.row(scope)
	if e.used.Load() == 0 {
		e.used.Store(k.usedAt(now))
	}
	return e.current(), e
}

// useRow is use, first trying the row that hint holds (nil: none), which
// it then updates: a call's route keeps its scope's row (route.go).
func (k *knowledge) useRow(hint *atomic.Pointer[known], scope string, now instant.Time) (*fact, *known) {
	if hint == nil {
		return k.use(scope, now)
	}
	if e := hint.Load(); e != nil && k.touch(e, now) {
		return e.current(), e
	}
	f, e := k.use(scope, now)
	hint.Store(e)
	return f, e
}

// usedAt is now as a mark of use: the instant itself, at least 1 (0 and
// forgotten say other things; instants count from a year before the
// process started, clock.go).
func (k *knowledge) usedAt(now instant.Time) int64 { return max(int64(now), 1) }

// forgotten is the mark of use of a row dropped from the table.
const forgotten = -1

// touch marks a call of e's scope at now. Coarse, so that a busy scope's
// callers do not all write one cache line: forgetting needs no finer time
// than a window. It reports false when e was forgotten meanwhile.
func (k *knowledge) touch(e *known, now instant.Time) bool {
	u := e.used.Load()
	if u == forgotten {
		return false
	}
	t := k.usedAt(now)
	if t-u <= int64(k.idle/16) {
		return true
	}
	// Against forget: one of the two changes the mark.
	return e.used.CompareAndSwap(u, t) || e.used.Load() != forgotten
}

// nothingKnown is the fact of a scope the coordinator said nothing of.
var nothingKnown = &fact{}

// current is what e holds, for admissions.
func (e *known) current() *fact {
	if f := e.now.Load(); f != nil {
		return f
	}
	return nothingKnown
}

// publish makes the changes to e.fact current, in into, a fact of its
// own, allocated before k.mu was taken: an allocation under the lock
// makes a convoy of a burst of failures. k.mu is held.
func (e *known) publish(into *fact) {
	*into = e.fact
	e.now.Store(into)
}

// row returns scope's row, making it if needed, as used never: only a
// call marks a scope used, so that the answer to a late Record does not
// keep a scope nobody calls. k.mu is held.
func (k *knowledge) row(scope string) *known {
	e := k.scopes[scope]
	if e == nil {
		e = &known{}
		k.scopes[scope] = e
		k.index.Store(scope, e)
	}
	return e
}

// answers reports whether f, what use returned at now, decides an
// admission without asking the coordinator.
func (k *knowledge) answers(f *fact, now instant.Time) bool {
	if k.maxAge == 0 || f.gen == 0 || f.trust == 0 || f.trust != k.live.Load() {
		return false
	}
	if !f.hintUntil.IsZero() && !now.Before(f.hintUntil) {
		return false
	}
	if admitsAll(f.state) {
		return now.Sub(f.checked) < k.maxAge
	}
	// Half-open never answers: only the coordinator hands out probe slots.
	return f.state != coordinator.StateHalfOpen && now.Before(f.until)
}

// notClosed returns what is known of a scope last seen in a state that
// does not admit every call, whichever feed connection said so: while the
// coordinator is unreachable such a scope is rejected.
func (k *knowledge) notClosed(scope string) (fact, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	e := k.scopes[scope]
	if e == nil || e.gen == 0 || admitsAll(e.state) {
		return fact{}, false
	}
	return e.fact, true
}

// pushed reports whether a pushback answered to a call of scope of
// generation gen, or a later one, already reached the coordinator.
func (k *knowledge) pushed(scope string, gen uint64) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	e := k.scopes[scope]
	return e != nil && e.pushed.Load() >= gen
}

// pushDone notes that a pushback answered to a call of scope of
// generation gen reached the coordinator.
func (k *knowledge) pushDone(scope string, gen uint64) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if e := k.scopes[scope]; e != nil {
		for {
			old := e.pushed.Load()
			if old >= gen || e.pushed.CompareAndSwap(old, gen) {
				return
			}
		}
	}
}

// begin is called before a coordinator call about scope. It returns the
// feed connection that already follows scope (0 if none), to go with the
// answer to learn, and the generation the table holds for scope (0 if
// none), which the coordinator must not be behind (a request's Seen).
// It asks the feed to follow scope if it does not and the scope is in use
// (a Record of a scope forgotten meanwhile brings it back to no feed).
func (k *knowledge) begin(scope string) (epoch, seen uint64) {
	live := k.live.Load()
	k.mu.RLock()
	e := k.scopes[scope]
	if e != nil {
		seen = e.confirmed
	}
	followed := e != nil && live != 0 && e.followed == live
	k.mu.RUnlock()
	if followed {
		return live, seen
	}
	if e == nil || k.maxAge == 0 {
		return 0, seen
	}
	k.mu.Lock()
	if _, queued := k.follow[scope]; !queued && k.scopes[scope] != nil {
		k.follow[scope] = struct{}{}
		k.signal()
	}
	k.mu.Unlock()
	return 0, seen
}

func (k *knowledge) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// learn keeps what the coordinator answered about scope at now, to a
// question asked while feed connection epoch followed it (0: none), unless
// the table knows something newer.
func (k *knowledge) learn(epoch uint64, scope string, a answer, now instant.Time) {
	f := fact{state: a.state, gen: a.gen, checked: now, window: a.window}
	if a.hint {
		// The feed is a hint: anyone allowed to publish on its channels
		// can send a well-formed message. What it says is believed for an
		// open period of the scope's policy at most, never for as long as
		// a message may claim, and then the next call asks the
		// coordinator, whose answer replaces it whatever its generation.
		f.hintUntil = now.Add(k.policyOf(scope).p.OpenFor)
	}
	if a.cause != "" {
		f.cause = spanOf(a.cause)
	}
	if epoch != 0 && epoch == k.live.Load() {
		f.trust = epoch
	}
	if a.rampLeft > 0 && a.state == coordinator.StateClosed {
		f.rampEnd = now.Add(a.rampLeft)
	}
	switch {
	case a.retryAfter > 0 && (a.state == coordinator.StateOpen || a.state == coordinator.StateIsolated):
		f.until = now.Add(a.retryAfter)
	case a.state == coordinator.StateIsolated:
		// Until released: an operator may release it any time, and the
		// feed that would say so may have died without a word.
		f.until = now.Add(k.maxAge)
	}
	if !f.hintUntil.IsZero() && f.hintUntil.Before(f.until) {
		f.until = f.hintUntil
	}
	into := new(fact)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.scopes[scope] == nil && admitsAll(f.state) {
		// The scope was forgotten (no call for a window) while the
		// question was out: "closed" is no news worth a row.
		return
	}
	e := k.row(scope)
	if a.saysPolicy {
		k.versionSaid(scope, e, a.policyVersion)
	}
	if !a.hint {
		e.confirmed = max(e.confirmed, a.gen)
	}
	if newer(f, e.fact, now) {
		if f.window == (window{}) && f.gen == e.gen {
			f.window = e.window
		}
		if f.gen == e.gen {
			f.outlier = e.outlier
		}
		if f.gen == e.gen && f.state == e.state && !f.cause.IsValid() {
			f.cause = e.cause
		}
		f.policy = e.policy
		e.fact = f
	}
	if a.saysOutlier && a.gen == e.gen {
		o := outlierOf(a, now)
		if o.gen != 0 && !now.Before(o.until) && e.outlier.of(&e.fact) {
			// Still waiting for its probe's answer: the probe keeps its slot.
			o.probe = e.outlier.probe
		}
		if o.gen != 0 && o.gen == e.outlier.gen {
			o.cause = e.outlier.cause
		}
		e.outlier = o
	}
	e.publish(into)
}

// introduce reports whether scope's outcomes have yet to reach the
// coordinator since the scope was last forgotten, and notes that they do
// now. The first goes at once: until the coordinator hears this replica,
// a replica failing alone may seem the whole fleet to it (Policy.Outliers).
// k.mu is not held.
func (k *knowledge) introduce(scope string) bool {
	k.mu.RLock()
	e := k.scopes[scope]
	// Under the plain rules the coordinator has no use for it.
	done := e == nil || e.heard || k.policyIn(&e.fact).p.Outliers == 0
	k.mu.RUnlock()
	if done {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e = k.scopes[scope]; e == nil || e.heard {
		return false
	}
	e.heard = true
	return true
}

// probeOutlier takes this replica's one probe slot in scope, where it is
// an outlier of generation gen whose period has ended, until now + lease:
// it reports false while another probe holds it.
func (k *knowledge) probeOutlier(scope string, gen uint64, now instant.Time, lease time.Duration) bool {
	into := new(fact)
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.scopes[scope]
	if e == nil || !e.outlier.of(&e.fact) || e.gen != gen || now.Before(e.outlier.probe) {
		return false
	}
	e.outlier.probe = now.Add(lease)
	e.publish(into)
	return true
}

// outliers calls f with each scope where this replica is an outlier.
func (k *knowledge) outliers(f func(scope string)) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for scope, e := range k.scopes {
		if e.outlier.of(&e.fact) {
			f(scope)
		}
	}
}

// newer reports whether f may replace old at now: generations only grow,
// and within one generation open comes before half-open and disabled
// before closed; but the coordinator's word replaces the feed's once the
// feed's has been believed long enough (learn), whatever its generation:
// a message may claim any.
func newer(f, old fact, now instant.Time) bool {
	if f.hintUntil.IsZero() && !old.hintUntil.IsZero() && !now.Before(old.hintUntil) {
		return true
	}
	if f.gen != old.gen {
		return f.gen > old.gen
	}
	return !(f.state == coordinator.StateOpen && old.state == coordinator.StateHalfOpen) &&
		!(f.state == coordinator.StateDisabled && old.state == coordinator.StateClosed)
}

// forget drops the scopes with no call since idle before now whose known
// open period, if any, has ended, and asks the feed to unfollow them. It
// returns how many scopes it dropped.
func (k *knowledge) forget(now instant.Time) int {
	live := k.live.Load()
	cutoff := k.usedAt(now.Add(-k.idle))
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for scope, e := range k.scopes {
		u := e.used.Load()
		if u > cutoff || now.Before(e.until) || !e.used.CompareAndSwap(u, forgotten) {
			continue
		}
		delete(k.scopes, scope)
		k.index.Delete(scope)
		delete(k.follow, scope)
		n++
		if live != 0 && e.followed == live {
			k.unfollow = append(k.unfollow, scope)
		}
	}
	if len(k.unfollow) > 0 {
		k.signal()
	}
	return n
}

// states calls f with what the table knows of each scope's state as of
// now, as the coordinator would say it: an open period that has ended
// reads half-open. Scopes of which nothing is known yet are left out.
func (k *knowledge) states(now instant.Time, f func(scope string, s coordinator.State)) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for scope, e := range k.scopes {
		if e.gen == 0 {
			continue
		}
		s := e.state
		if s == coordinator.StateOpen && !e.until.IsZero() && !now.Before(e.until) {
			s = coordinator.StateHalfOpen
		}
		f(scope, s)
	}
}

// size is how many scopes the table holds.
func (k *knowledge) size() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.scopes)
}

// all returns every scope of the table, for a new feed connection to
// follow.
func (k *knowledge) all() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	scopes := make([]string, 0, len(k.scopes))
	for s := range k.scopes {
		scopes = append(scopes, s)
	}
	return scopes
}

// connected makes epoch the live feed connection, which follows scopes.
func (k *knowledge) connected(epoch uint64, scopes []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	// The old connection's unfollows die with it.
	k.unfollow = k.unfollow[:0]
	k.mark(epoch, scopes)
	k.live.Store(epoch)
	k.signal()
}

// mark records that the feed connection epoch now follows scopes; those
// forgotten meanwhile go to be unfollowed. k.mu is held.
func (k *knowledge) mark(epoch uint64, scopes []string) {
	for _, s := range scopes {
		if e := k.scopes[s]; e != nil {
			e.followed = epoch
		} else {
			k.unfollow = append(k.unfollow, s)
		}
	}
}

// disconnected ends the live feed connection epoch: what it said stays
// known, but no longer answers admissions.
func (k *knowledge) disconnected(epoch uint64) {
	k.live.CompareAndSwap(epoch, 0)
}

// work returns what the feed connection epoch has to do: scopes to follow
// and scopes to unfollow.
func (k *knowledge) work(epoch uint64) (follow, unfollow []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for s := range k.follow {
		if e := k.scopes[s]; e != nil && e.followed != epoch {
			follow = append(follow, s)
		}
	}
	clear(k.follow)
	unfollow, k.unfollow = k.unfollow, nil
	return follow, unfollow
}

// followed records that the feed connection epoch now follows scopes.
func (k *knowledge) followed(epoch uint64, scopes []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mark(epoch, scopes)
	if len(k.unfollow) > 0 {
		k.signal()
	}
}

// caused makes sc the cause of scope's state, if the table holds it in
// generation gen and state s without a cause yet: a cause heard late, of
// a state the scope has left, changes nothing.
func (k *knowledge) caused(scope string, gen uint64, s coordinator.State, sc trace.SpanContext) {
	into := new(fact)
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.scopes[scope]
	if e == nil || e.gen != gen || e.state != s || e.cause.IsValid() {
		return
	}
	e.cause = sc
	e.publish(into)
}

// outlierCaused makes sc the cause of this replica's spell as an outlier
// of scope, the one the table holds.
func (k *knowledge) outlierCaused(scope string, sc trace.SpanContext) {
	into := new(fact)
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.scopes[scope]
	if e == nil || !e.outlier.of(&e.fact) {
		return
	}
	e.outlier.cause = sc
	e.publish(into)
}
