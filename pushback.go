package cbgrpc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// pushTimeout bounds a push: no call waits for it, so it may take longer
// than an admission, and an answer cut short would lose the transition's
// span (the push itself may have landed).
const pushTimeout = time.Second

// pushbackTrailer is the trailer of gRPC's retry design (A6) by which a
// server says how long to wait before calling again, in milliseconds.
const pushbackTrailer = "grpc-retry-pushback-ms"

// pushbackRule says which answers may carry a pushback that opens a
// breaker (WithServerPushback).
type pushbackRule struct {
	codes   map[codes.Code]bool
	methods methodSet // none: every method
}

func (r *pushbackRule) applies(method string, code codes.Code) bool {
	return r != nil && r.codes[code] && (len(r.methods) == 0 || r.methods.has(method))
}

// stayAway is the period pushbackOf gives a pushback that says "do not
// call again soon": coordinator.Pusher takes a period below 1 as the
// longest the policy allows.
const stayAway time.Duration = -1

// pushbackOf reads the pushback an answer carries: the pushback trailer,
// else a google.rpc.RetryInfo detail of its status. ok is false when it
// carries none, or a pushback of 0, which in gRPC's retry design means
// "retry now": nothing to push, the call's outcome counts as any other.
// A trailer that is negative or no integer, or a RetryInfo with a
// negative or unreadable delay, says "do not call again soon", as gRPC's
// retry design reads a malformed pushback: period stayAway.
func pushbackOf(st *status.Status, trailer metadata.MD) (period time.Duration, reason string, ok bool) {
	if v := trailer.Get(pushbackTrailer); len(v) > 0 {
		ms, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
		if err != nil || ms < 0 {
			return stayAway, fmt.Sprintf("server pushback: %s %q, do not call again soon", pushbackTrailer, v[0]), true
		}
		if ms == 0 {
			return 0, "", false
		}
		d := time.Duration(ms) * time.Millisecond
		if ms > int64(24*time.Hour/time.Millisecond) {
			d = 24 * time.Hour // far beyond any cap: no overflow
		}
		return d, fmt.Sprintf("server pushback %v", d), true
	}
	for _, detail := range st.Details() {
		ri, isRetryInfo := detail.(*errdetails.RetryInfo)
		if !isRetryInfo {
			continue
		}
		delay := ri.GetRetryDelay()
		if delay.CheckValid() != nil || delay.AsDuration() < 0 {
			return stayAway, "server pushback: RetryInfo with an unreadable delay, do not call again soon", true
		}
		d := delay.AsDuration()
		if d == 0 {
			return 0, "", false
		}
		return d, fmt.Sprintf("server pushback %v (RetryInfo)", d), true
	}
	return 0, "", false
}

// WithServerPushback lets a server that is overloaded keep the whole fleet
// away: an answer with one of the codes in on, to one of methods (full methods
// "/pkg.Service/Method" or services "/pkg.Service/"; none: every method),
// that carries gRPC's grpc-retry-pushback-ms trailer or a
// google.rpc.RetryInfo detail opens the scope's breaker for the time the
// server asked, capped at the policy's MaxOpenFor (OpenFor without
// back-off), then probes as after any trip. A pushback of 0 means "retry
// now", as in gRPC's retry design: it opens nothing, and the call counts
// as any other. A negative or malformed pushback means "do not call again
// soon": the cap. The server's time wins: if the pushed-back failure
// trips the breaker itself (or is a failed probe), the open period is the
// server's, not OpenFor or the back-off. One transition per generation,
// however many calls got the answer (coordinator.Pusher fences it); its
// reason says "server pushback 2s", unless the failure's own trip got
// there first.
//
// Off by default, and scoped on purpose: a per-user quota error carrying
// RetryInfo (ResourceExhausted from a rate limiter) must not open the
// breaker for every user. List only codes and methods whose pushback
// speaks for the whole dependency. The coordinator must be a
// coordinator.Pusher (both of this module's are); New fails otherwise.
func WithServerPushback(on []codes.Code, methods ...string) Option {
	return optionFunc(func(c *config) {
		r := &pushbackRule{codes: make(map[codes.Code]bool, len(on)), methods: make(methodSet, len(methods))}
		for _, code := range on {
			r.codes[code] = true
		}
		for _, m := range methods {
			r.methods[m] = struct{}{}
		}
		c.pushback = r
	})
}

func (r *pushbackRule) validate() error {
	if r == nil {
		return nil
	}
	if len(r.codes) == 0 {
		return fmt.Errorf("cbgrpc: WithServerPushback: no codes; say which answers may push back (e.g. codes.ResourceExhausted, codes.Unavailable)")
	}
	if r.codes[codes.OK] {
		return fmt.Errorf("cbgrpc: WithServerPushback: codes.OK is no failure; a successful answer never opens the breaker")
	}
	for m := range r.methods {
		if err := checkMethod("WithServerPushback", m); err != nil {
			return err
		}
	}
	return nil
}

// pushedBack opens t's scope fleet-wide if err carries a pushback the rule
// applies to, in the background: the call has its answer already. The
// call's own outcome may have opened the breaker first, so a breaker known
// open in a later generation is still pushed to: the coordinator then sets
// the open period to the server's (coordinator.Pusher). A burst of
// pushbacks answered to this process's calls makes one round trip per
// scope at a time, and none once one of their generation has landed.
func (b *Breaker) pushedBack(ctx context.Context, c call, err error, trailer metadata.MD) {
	if b.cfg.pushback == nil || err == nil || (c.fate != recorded && c.fate != probing) {
		return
	}
	st, _ := status.FromError(err)
	if !b.cfg.pushback.applies(c.method, st.Code()) {
		return
	}
	period, reason, ok := pushbackOf(st, trailer)
	if !ok {
		return
	}
	if f, known := b.known.notClosed(c.scope); known && (f.gen > c.gen && b.known.pushed(c.scope, c.gen) || f.state != coordinator.StateHalfOpen && f.gen == c.gen) {
		return
	}
	if _, busy := b.pushing.LoadOrStore(c.scope, struct{}{}); busy {
		return
	}
	if !b.enter() {
		b.pushing.Delete(c.scope)
		return
	}
	pusher := b.c.(coordinator.Pusher)
	go func() {
		defer b.admits.Done()
		defer b.pushing.Delete(c.scope)
		// The transition belongs in the trace of the call that got the
		// answer, which has returned by now.
		ctx := context.WithoutCancel(ctx)
		b.roundTrip(ctx, exchange{op: "push", scope: c.scope, timeout: pushTimeout, wg: &b.admits},
			func(ctx context.Context, seen uint64) (answer, error) {
				res, err := pusher.Push(ctx, coordinator.PushRequest{Scope: c.scope, Policy: b.known.policyOf(c.scope).p, Generation: c.gen, Period: period, Reason: reason, Seen: seen})
				if err == nil {
					b.known.pushDone(c.scope, c.gen)
				}
				return resulted(res), err
			})
	}()
}
