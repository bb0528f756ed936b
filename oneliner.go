package cbgrpc

import (
	"reflect"
	"runtime"
	"sync"
	"weak"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The one-liners, Unary and Stream, have no Breaker for their caller to
// share or Close. So that the card's two dial options make one breaker,
// not two, Unary(c) and Stream(c) without options share the Breaker of c
// while either interceptor is in use; and every Breaker a one-liner made
// is closed once no interceptor of it is reachable (the connection that
// held them is closed and dropped), so that its goroutines end with them.

// oneLiner is what a one-liner's interceptors hold: while one is
// reachable, its Breaker is in use.
type oneLiner struct{ b *Breaker }

// shared holds, per coordinator, the one-liner Unary and Stream without
// options share, weakly: it does not keep the Breaker in use.
var shared = struct {
	sync.Mutex
	m map[coordinator.Coordinator]weak.Pointer[oneLiner]
}{m: make(map[coordinator.Coordinator]weak.Pointer[oneLiner])}

// oneLinerOf is the one-liner fn (Unary or Stream) gives for c and opts:
// the shared one of c when there are no options, a new one otherwise. It
// panics as mustNew does.
func oneLinerOf(fn string, c coordinator.Coordinator, opts []Option) *oneLiner {
	if len(opts) > 0 || c == nil || !reflect.TypeOf(c).Comparable() {
		return newOneLiner(fn, c, opts, nil)
	}
	shared.Lock()
	defer shared.Unlock()
	if o := shared.m[c].Value(); o != nil {
		return o
	}
	o := newOneLiner(fn, c, nil, func() {
		shared.Lock()
		defer shared.Unlock()
		if p, ok := shared.m[c]; ok && p.Value() == nil {
			delete(shared.m, c)
		}
	})
	shared.m[c] = weak.Make(o)
	return o
}

// newOneLiner makes a Breaker over c that is closed, and then gone (the
// call of forget), once the one-liner holding it is unreachable.
func newOneLiner(fn string, c coordinator.Coordinator, opts []Option, forget func()) *oneLiner {
	b := mustNew(fn, c, opts)
	o := &oneLiner{b: b}
	runtime.AddCleanup(o, func(b *Breaker) {
		if forget != nil {
			forget()
		}
		// Close flushes outcomes for up to its bound: not on the
		// runtime's cleanup goroutine.
		go b.Close()
	}, b)
	return o
}
