package redis

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the next '}' when not empty, else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

func FuzzScopeKeys(f *testing.F) {
	for _, s := range []string{"", "a", "{", "}", "{}", "a{b}c", "}{", "svc|/pkg.Svc/Method", "\x00\n\xff", "ünïcode"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := scopeKeys(DefaultPrefix, a), scopeKeys(DefaultPrefix, b)
		tag := hashTag(ka[0])
		if len(tag) != 64 || strings.ContainsAny(tag, "{}") {
			t.Fatalf("scope %q: hash tag %q is not a digest", a, tag)
		}
		seen := map[string]bool{}
		for _, k := range ka {
			if !strings.HasPrefix(k, DefaultPrefix+"v2:{") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Fatalf("scope %q: key %q has not exactly one hash tag after the prefix and the layout", a, k)
			}
			if hashTag(k) != tag {
				t.Fatalf("scope %q: key %q hashes as %q, not %q: another slot", a, k, hashTag(k), tag)
			}
			seen[k] = true
		}
		if len(seen) != len(ka) {
			t.Fatalf("scope %q: keys repeat: %q", a, ka)
		}
		if a == b {
			return
		}
		for _, k := range kb {
			if seen[k] {
				t.Fatalf("scopes %q and %q share key %q", a, b, k)
			}
		}
	})
}

// Every key and the channel of a scope live under <prefix>v2:{, so that a
// coordinator of another layout never touches them; the state hash holds
// the fields doc.go names.
func TestKeysLiveUnderTheLayoutVersion(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	clock := coordinatortest.NewClock()
	const prefix = "deploy:"
	c := New(rdb, WithClock(clock.Now), WithPrefix(prefix))
	p := watchPolicy
	follow(t, ctx, c, "s")
	// Every key at once: a remembered batch, then half-open with a lease.
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true}}, BatchID: "b"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(p.OpenFor)
	if d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "probe"}); err != nil || d.Verdict != coordinator.Probe {
		t.Fatalf("Admit after the open period = %+v, %v", d, err)
	}

	// The Watch's channels (heartbeats; on a single server, the fleet's)
	// live under the layout too.
	layout := regexp.MustCompile(`^deploy:v2:(\{[0-9a-f]{64}\}:(state|window|probes|transitions)|\{fleet\}:heartbeat(:.+)?)$`)
	k := scopeKeys(prefix, "s")
	got, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{k[keyProbes], k[keyState], k[keyWindow]}
	if !slices.Equal(got, want) {
		t.Fatalf("keys %q; want %q", got, want)
	}
	channels, err := rdb.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(channels, k[keyChannel]) {
		t.Fatalf("channels %q; want %q among them", channels, k[keyChannel])
	}
	for _, name := range append(got, channels...) {
		if !layout.MatchString(name) {
			t.Errorf("%q is not <prefix>v2:{<sha256>}:<name> nor a heartbeat channel of the fleet", name)
		}
	}
	fields, err := rdb.HKeys(ctx, k[keyState]).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fields)
	if want := []string{"batch_count", "batches", "consecutive_failures", "consecutive_stalls", "expires_at", "failing_since", "gc_until", "generation", "moved", "open_for", "open_until", "opened_at", "policy:" + p.Fingerprint(), "probe_successes", "pushable_generation", "recovered_at", "scope", "state", "trip_at", "trip_calls", "trip_failures", "trip_generation", "trip_reason", "trip_slow"}; !slices.Equal(fields, want) {
		t.Errorf("state hash fields %q; want %q", fields, want)
	}
	if got := rdb.HGet(ctx, k[keyState], "state").Val(); got != "half-open" {
		t.Errorf("state field %q; want half-open", got)
	}
	window, err := rdb.HGetAll(ctx, k[keyWindow]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(window) != 1 || window["generation"] != rdb.HGet(ctx, k[keyState], "generation").Val() {
		t.Errorf("window %q; want the generation label alone, the state's", window)
	}
}

// The key names redistest.ScopeKey gives tests are the coordinator's.
func TestRedistestNamesTheScopeKeys(t *testing.T) {
	for _, scope := range []string{"s", "svc|/pkg.Svc/Method", "{}"} {
		k := scopeKeys("deploy:", scope)
		for part, i := range map[string]int{"state": keyState, "window": keyWindow, "probes": keyProbes, "policy": keyPolicy} {
			if got := redistest.ScopeKey("deploy:", scope, part); got != k[i] {
				t.Errorf("redistest.ScopeKey(%q, %q) = %q; the coordinator's is %q", scope, part, got, k[i])
			}
		}
	}
}
