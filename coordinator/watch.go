package coordinator

import (
	"context"
	"errors"
)

// Watcher is implemented by coordinators that publish every transition
// they make, whichever replica caused it. A Breaker uses it to learn of a
// trip without asking the coordinator on every call.
type Watcher interface {
	// Watch opens a subscription that follows no scope yet.
	Watch(ctx context.Context) (Watch, error)
}

// Watch is one subscription to a coordinator's transition feed. Its
// methods may be called from different goroutines, but Next from only one
// at a time.
type Watch interface {
	// Follow adds scopes to the subscription. Transitions made before
	// Follow returns may be missed: read the scope's state afterwards.
	Follow(ctx context.Context, scopes ...string) error

	// Unfollow removes scopes from the subscription, so that a
	// subscriber's cost stays bounded by the scopes it still uses. Next
	// delivers no transition of a scope after Unfollow of it returns.
	// Unfollowing a scope that is not followed does nothing.
	Unfollow(ctx context.Context, scopes ...string) error

	// Next blocks until the next transition of a followed scope, ctx ends,
	// or the feed breaks. An error wrapping [ErrFeedLost] means
	// transitions may have been missed: everything learned from the feed
	// so far must be forgotten. After any error the Watch is done; open
	// another to resume.
	Next(ctx context.Context) (Transition, error)

	// Close ends the subscription and releases its connection.
	Close() error
}

// ErrFeedLost is wrapped by Watch.Next when the feed may have missed
// transitions: the connection broke, or the reader fell behind.
var ErrFeedLost = errors.New("transition feed lost")
