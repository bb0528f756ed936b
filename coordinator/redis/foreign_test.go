package redis

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// foreign are messages that no script of this module publishes, as anyone
// with PUBLISH on the server can send them on a scope's channel.
var foreign = []string{
	"", "hello", "1 2", "0 1 5 1700000000000 0", // too few fields
	"x 1 5 1700000000000 0 junk", "0 1 -5 1700000000000 0 junk", // not numbers of ours
	"0 99 5 1700000000000 0 no such state", "-1 1 5 1700000000000 0 no such state",
	"policy", "policy x", "policy -1", // an override change with no version
}

// A message on a scope's channel that is not a transition or an override
// change of this module is ignored and counted: it does not end the feed,
// and the transitions published around it still come, in order.
func TestWatchIgnoresForeignMessages(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(srv.Client(t))
	w := follow(t, ctx, c, "s")
	var changes []coordinator.PolicyChange
	if err := w.(coordinator.PolicyWatch).FollowPolicies(ctx, func(pc coordinator.PolicyChange) { changes = append(changes, pc) }); err != nil {
		t.Fatal(err)
	}
	ch := scopeKeys(c.prefix, "s")[keyChannel]
	_, fleetCh := fleetKeys(c.prefix)
	admin := srv.Client(t)
	publish := func(channel, payload string) {
		t.Helper()
		if err := admin.Publish(ctx, channel, payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range foreign {
		publish(ch, m)
	}
	publish(fleetCh, "policy not-a-version")
	tripped := trip(t, c, "s")
	for _, m := range foreign {
		publish(ch, m)
	}
	released := release(t, c, "s")
	next(t, ctx, w, tripped)
	next(t, ctx, w, released)
	if got, want := c.IgnoredMessages(), uint64(2*len(foreign)+1); got != want {
		t.Errorf("IgnoredMessages() = %d; want %d, one for each foreign message published", got, want)
	}
	if len(changes) != 0 {
		t.Errorf("policy changes heard: %+v; want none from foreign messages", changes)
	}
	if err := w.Follow(ctx, "t"); err != nil {
		t.Errorf("Follow after foreign messages: %v; want the Watch alive", err)
	}
}
