package cbgrpc

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

const (
	closed   = coordinator.StateClosed
	open     = coordinator.StateOpen
	halfOpen = coordinator.StateHalfOpen
	isolated = coordinator.StateIsolated
	disabled = coordinator.StateDisabled
)

// Answers are ordered by generation: an answer about an older generation
// never overrides a newer one, and within one generation the state moves
// only forward (open before half-open, disabled before closed).
func TestKnowledgeOrdersAnswersByGeneration(t *testing.T) {
	for _, c := range []struct {
		old, next answer
		replaced  bool
	}{
		{answer{state: open, gen: 2}, answer{state: closed, gen: 1}, false}, // a stale "closed" never erases "open"
		{answer{state: closed, gen: 1}, answer{state: open, gen: 2}, true},
		{answer{state: open, gen: 2}, answer{state: halfOpen, gen: 2}, true},
		{answer{state: halfOpen, gen: 2}, answer{state: open, gen: 2}, false},  // a late reject while open
		{answer{state: disabled, gen: 3}, answer{state: closed, gen: 3}, true}, // enable keeps the generation
		{answer{state: closed, gen: 3}, answer{state: disabled, gen: 3}, false},
		{answer{state: closed, gen: 3}, answer{state: closed, gen: 3}, true}, // a confirmation refreshes
		{answer{state: isolated, gen: 5}, answer{state: closed, gen: 4}, false},
		{answer{state: closed, gen: 1 << 50}, answer{state: closed, gen: 1<<50 + 1}, true}, // born again above
	} {
		t.Run(fmt.Sprintf("%v@%d then %v@%d", c.old.state, c.old.gen, c.next.state, c.next.gen), func(t *testing.T) {
			k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
			now := instant.Now()
			k.use("s", now)
			k.learn(0, "s", c.old, now)
			k.learn(0, "s", c.next, now.Add(time.Millisecond))
			want := c.old
			if c.replaced {
				want = c.next
			}
			f := k.scopes["s"].fact
			if f.state != want.state || f.gen != want.gen {
				t.Errorf("knows %v@%d; want %v@%d", f.state, f.gen, want.state, want.gen)
			}
		})
	}
}

// Every answer that says open carries when the open period ends, and that
// is what the table keeps, not OpenFor: a reopened breaker's doubled
// period is rejected for as long as it runs.
func TestKnowledgeKeepsTheOpenPeriodTheAnswerGives(t *testing.T) {
	k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
	now := instant.Now()
	k.live.Store(1)
	k.learn(1, "s", answer{state: open, gen: 7, retryAfter: 2 * time.Second}, now)
	f, _ := k.use("s", now)
	if f.until != now.Add(2*time.Second) {
		t.Errorf("until %v; want now + 2s", f.until.Sub(now))
	}
	if !k.answers(f, now.Add(1999*time.Millisecond)) || k.answers(f, now.Add(2*time.Second)) {
		t.Error("the open answer does not decide admissions for exactly its period")
	}
	heard := heard(coordinator.Transition{To: open, Generation: 8, At: time.UnixMilli(5000), OpenUntil: time.UnixMilli(9000)}, 0)
	if heard.retryAfter != 4*time.Second {
		t.Errorf("a transition on the feed gives retryAfter %v; want OpenUntil - At = 4s", heard.retryAfter)
	}
}

// An answer serves admissions only while the feed connection that followed
// its scope before the question lives; one learned on a connection that
// has died still says the scope is not closed, for outages.
func TestKnowledgeTrustsOnlyTheLiveFeed(t *testing.T) {
	k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
	now := instant.Now()
	k.use("s", now)
	if epoch, _ := k.begin("s"); epoch != 0 {
		t.Fatalf("begin before any feed: epoch %d; want 0", epoch)
	}
	follow, _ := k.work(1)
	if !slices.Equal(follow, []string{"s"}) {
		t.Fatalf("feed work %v; want to follow s", follow)
	}
	k.connected(1, follow)
	epoch, _ := k.begin("s")
	if epoch != 1 {
		t.Fatalf("begin once followed: epoch %d; want 1", epoch)
	}
	k.learn(epoch, "s", answer{state: open, gen: 3, retryAfter: time.Minute}, now)
	if f, _ := k.use("s", now); !k.answers(f, now) {
		t.Fatal("an open answer on the live feed does not decide admissions")
	}
	k.disconnected(1)
	if f, _ := k.use("s", now); k.answers(f, now) {
		t.Error("an answer of a dead feed decides admissions")
	}
	if _, ok := k.notClosed("s"); !ok {
		t.Error("an open scope learned on a dead feed is not remembered for outages")
	}
	// An answer to a question asked before the scope was followed never
	// serves admissions: a transition made in between could be unheard.
	k.connected(2, nil)
	k.learn(0, "s", answer{state: closed, gen: 4}, now)
	if f, _ := k.use("s", now); k.answers(f, now) {
		t.Error("an answer to a question asked before the feed followed the scope decides admissions")
	}
}

// Only a call makes a row: the answer to a Record of a scope forgotten
// meanwhile keeps no row unless it says the scope is not closed, which an
// outage must know until the open period ends.
func TestKnowledgeRowsComeFromCalls(t *testing.T) {
	k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
	now := instant.Now()
	k.learn(0, "closed", answer{state: closed, gen: 1}, now)
	k.learn(0, "open", answer{state: open, gen: 2, retryAfter: time.Second}, now)
	if k.size() != 1 {
		t.Fatalf("%d rows; want only the open one", k.size())
	}
	if n := k.forget(now); n != 0 {
		t.Errorf("forgot %d rows while the open period runs; want 0", n)
	}
	if n := k.forget(now.Add(time.Second)); n != 1 {
		t.Errorf("forgot %d rows once the open period ended; want 1", n)
	}
}

// A scope with no call for a whole window is forgotten, and unfollowed on
// the feed; one whose open period is still running is kept until it ends.
func TestKnowledgeForgetsIdleScopes(t *testing.T) {
	const idle = time.Minute
	k := newKnowledge(time.Second, idle, coordinator.DefaultPolicy())
	now := instant.Now()
	for _, s := range []string{"busy", "idle", "open"} {
		k.use(s, now)
	}
	k.connected(1, []string{"busy", "idle", "open"})
	k.learn(1, "open", answer{state: open, gen: 2, retryAfter: 2 * idle}, now)
	later := now.Add(idle + time.Second)
	k.use("busy", later)
	if n := k.forget(later); n != 1 {
		t.Errorf("forgot %d scopes; want 1", n)
	}
	if _, unfollow := k.work(1); !slices.Equal(unfollow, []string{"idle"}) {
		t.Errorf("unfollow %v; want [idle]", unfollow)
	}
	if n := k.forget(now.Add(3 * idle)); n != 2 || k.size() != 0 {
		t.Errorf("after the open period: forgot %d, %d left; want 2 and 0", n, k.size())
	}
}

// A scope forgotten while the feed was following it goes back to be
// unfollowed, so that no subscription outlives the table's row.
func TestKnowledgeUnfollowsWhatWasForgottenWhileFollowing(t *testing.T) {
	k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
	now := instant.Now()
	k.connected(1, nil)
	k.use("s", now)
	k.begin("s")
	follow, _ := k.work(1)
	k.forget(now.Add(2 * time.Minute)) // while the feed's Follow runs
	k.followed(1, follow)
	if _, unfollow := k.work(1); !slices.Equal(unfollow, []string{"s"}) {
		t.Errorf("unfollow %v; want [s]", unfollow)
	}
}

// The state gauge reads the table as the coordinator would answer now: an
// open period that has ended reads half-open, and a scope of which
// nothing is known yet has no state.
func TestKnowledgeStatesAsOfNow(t *testing.T) {
	k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
	now := instant.Now()
	for _, s := range []string{"open", "closed", "unknown"} {
		k.use(s, now)
	}
	k.learn(0, "open", answer{state: open, gen: 2, retryAfter: time.Second}, now)
	k.learn(0, "closed", answer{state: closed, gen: 1}, now)
	states := func(at instant.Time) map[string]coordinator.State {
		m := make(map[string]coordinator.State)
		k.states(at, func(scope string, s coordinator.State) { m[scope] = s })
		return m
	}
	if got := states(now); len(got) != 2 || got["open"] != open || got["closed"] != closed {
		t.Errorf("during the open period: %v; want open and closed", got)
	}
	if got := states(now.Add(time.Second)); got["open"] != halfOpen {
		t.Errorf("once the open period ended: %v; want half-open", got)
	}
}

// The shared policy's part of the table: every coordinator answer says the
// version of its scope's override, and a scope whose version differs from
// the one it runs on goes to be read again, once; the feed's answers say
// nothing of it; a new answer keeps the policy the scope runs on; and a
// forgotten scope is read no more.
func TestKnowledgeAsksForOverridesItDoesNotRunOn(t *testing.T) {
	k := newKnowledge(time.Second, time.Minute, coordinator.DefaultPolicy())
	now := instant.Now()
	k.use("s", now)
	k.learn(0, "s", answer{state: closed, gen: 1, saysPolicy: true}, now)
	if got := k.stalePolicies(); len(got) != 0 {
		t.Fatalf("no override anywhere: %v to read; want none", got)
	}
	k.learn(0, "s", answer{state: closed, gen: 1, policyVersion: 7, saysPolicy: true}, now)
	k.learn(0, "s", heard(coordinator.Transition{Scope: "s", To: open, Generation: 2}, 0), now)
	k.learn(0, "s", answer{state: open, gen: 2, policyVersion: 7, saysPolicy: true}, now)
	if got := k.stalePolicies(); !slices.Equal(got, []string{"s"}) {
		t.Fatalf("an answer with version 7: %v to read; want [s]", got)
	}
	p := &inForce{p: coordinator.DefaultPolicy(), src: coordinator.SourceScope, layer: coordinator.PolicyLayer{Version: 7}}
	k.setPolicy("s", p)
	k.learn(0, "s", answer{state: open, gen: 3, policyVersion: 7, saysPolicy: true}, now)
	if got := k.policyOf("s"); got != p || len(k.stalePolicies()) != 0 {
		t.Errorf("after reading version 7 and a newer answer: runs on %+v; want it, and nothing to read", got)
	}
	k.saidPolicy("s", 8)
	k.saidPolicy("never used", 8)
	if got := k.stalePolicies(); !slices.Equal(got, []string{"s"}) {
		t.Errorf("the feed told of version 8: %v to read; want [s] alone", got)
	}
	k.saidPolicy("s", 9)
	k.forget(now.Add(time.Hour))
	if got := k.stalePolicies(); len(got) != 0 || k.policyOf("s") != k.base.Load() {
		t.Errorf("after forgetting s: %v to read, runs on %+v; want nothing, and the base", got, k.policyOf("s"))
	}
}
