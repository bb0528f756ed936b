package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/instant"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestRedisForgedTransitionIsAHint: anyone allowed to publish on the
// feed's channels can send a well-formed "open for an hour" of a
// generation far ahead. Replicas believe it for an open period of their
// policy at most, then ask the coordinator, whose "closed" replaces it;
// and the forged generation never reaches the coordinator as one the
// replica has seen, so the scope is not born again above it (its window
// wiped).
func TestRedisForgedTransitionIsAHint(t *testing.T) {
	srv := redistest.Start(t)
	p := quietPolicy()
	p.OpenFor = 300 * time.Millisecond
	const scope = "forged"
	c := cbredis.New(srv.Client(t))
	b := newBreaker(t, c, WithPolicy(p))
	if err := callOnce(b, scope, nil); err != nil {
		t.Fatal(err)
	}
	// Calls go on: an answer learned before the feed followed the scope is
	// not trusted, and the next call's answer is.
	eventually(t, "the scope followed and answered from the table", func() bool {
		if err := callOnce(b, scope, nil); err != nil {
			t.Fatal(err)
		}
		now := instant.Now()
		f, _ := b.known.use(scope, now)
		return b.known.answers(f, now)
	})
	before, err := c.Snapshot(context.Background(), scope, p)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	forged := fmt.Sprintf("0 1 %d %d %d forged", before.Generation+1000, now, now+time.Hour.Milliseconds())
	channel := redistest.ScopeKey(cbredis.DefaultPrefix, scope, "transitions")
	if err := srv.Client(t).Publish(context.Background(), channel, forged).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the forged message heard", func() bool { return errors.Is(callOnce(b, scope, nil), ErrOpen) })
	rejectedAt := time.Now()
	for errors.Is(callOnce(b, scope, nil), ErrOpen) {
		if time.Since(rejectedAt) > 10*p.OpenFor {
			t.Fatalf("calls still rejected %v after a forged message that said an hour", time.Since(rejectedAt))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("calls rejected for %v after a forged \"open for an hour\" (OpenFor %v)", time.Since(rejectedAt), p.OpenFor)
	after, err := c.Snapshot(context.Background(), scope, p)
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || after.Calls < before.Calls {
		t.Errorf("after the forged message: generation %d, %d calls; want %d and the window kept (%d calls)",
			after.Generation, after.Calls, before.Generation, before.Calls)
	}
}
