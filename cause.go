package cbgrpc

import (
	"context"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// caused makes sc, the span that recorded tr, a transition this process
// made, the cause of the state tr moved to: in the table at once, for
// this replica's rejections to link to, and through the coordinator
// ([coordinator.CauseKeeper]), for every other replica's, so that a
// rejection leads to the trace that opened the breaker wherever it was
// opened. The coordinator call runs in a goroutine counted in wg, off the
// path of the call that made the transition. An outlier's transition is
// this replica's alone: its cause stays in the table.
func (b *Breaker) caused(wg *sync.WaitGroup, tr *coordinator.Transition, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	if tr.Replica != "" {
		b.known.outlierCaused(tr.Scope, sc)
		return
	}
	b.known.caused(tr.Scope, tr.Generation, tr.To, sc)
	keeper, ok := b.c.(coordinator.CauseKeeper)
	if !ok {
		return
	}
	q := coordinator.CauseRequest{Scope: tr.Scope, Generation: tr.Generation, State: tr.To, Cause: traceparent(sc)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.roundTrip(context.Background(), exchange{op: "keep_cause", scope: q.Scope, timeout: b.cfg.timeout, wg: wg, mute: true},
			func(ctx context.Context, _ uint64) (answer, error) {
				_, err := keeper.KeepCause(ctx, q)
				return answer{}, err
			})
	}()
}

// traceparent is sc as a W3C traceparent, the form a coordinator keeps.
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// spanOf is the span context of a traceparent a coordinator answered: a
// remote one, since another process recorded it; the zero one for "" or
// what does not parse.
func spanOf(tp string) trace.SpanContext {
	if coordinator.CheckCause(tp) != nil {
		return trace.SpanContext{}
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	flags, err3 := strconv.ParseUint(tp[53:], 16, 8)
	if err1 != nil || err2 != nil || err3 != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true})
}
