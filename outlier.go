package cbgrpc

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// The coordinator may find this replica an outlier of a scope (Policy.
// Outliers): failing alone, its outcomes would trip the rules while the
// fleet's do not. The answer to its Record says so (Result.Outlier), the
// table keeps it (knowledge.learn), and this replica alone rejects its
// calls of the scope until the period the coordinator gave ends. Then it
// sends one call at a time as its probe, whose outcome goes at once,
// marked (Outcome.Probe): the coordinator's answer ends the spell, or
// starts another period; the outcomes of calls let through before the
// spell that end late are no probe. Nothing
// of it is decided here: the table only holds what the coordinator said.

// outlierFact is what the coordinator last said of this replica as an
// outlier of a scope, in generation gen; zero when it is none.
type outlierFact struct {
	gen    uint64
	until  instant.Time // the end of its period
	reason string
	// probe is, while a probe of this replica is out, until when it holds
	// the replica's one probe slot (local time): a probe whose outcome
	// never reaches the coordinator frees it then.
	probe instant.Time
	// cause is the span that recorded this replica's transition into the
	// spell, which its rejections link to (cause.go).
	cause trace.SpanContext
}

// of reports whether o speaks of the generation f holds.
func (o outlierFact) of(f *fact) bool { return o.gen != 0 && o.gen == f.gen }

// outlierOf is what an answer at now says of this replica as an outlier.
func outlierOf(a answer, now instant.Time) outlierFact {
	if a.outlier == nil {
		return outlierFact{}
	}
	return outlierFact{gen: a.gen, until: now.Add(a.outlier.RetryAfter), reason: a.outlier.Reason}
}

// admitOutlier decides a call of a scope where this replica is an outlier
// (f.outlier): rejected while its period lasts, then one call at a time
// as its probe, which c notes. ok is false when f says it is none.
func (b *Breaker) admitOutlier(ctx context.Context, c *call, f *fact) (err error, ok bool) {
	o := f.outlier
	if !o.of(f) {
		return nil, false
	}
	c.gen = f.gen // the generation it is rejected in, if it is
	if c.start.Before(o.until) {
		return b.rejectOutlier(ctx, c, o, o.until.Sub(c.start), "this replica alone is failing ("+o.reason+")"), true
	}
	lease := b.known.policyIn(f).p.ProbeLease
	if !b.known.probeOutlier(c.scope, f.gen, c.start, lease) {
		return b.rejectOutlier(ctx, c, o, 0, "this replica alone is failing ("+o.reason+"); its probe is out"), true
	}
	b.tel.decision(ctx, c, coordinator.Probe, byOutlier)
	// Not watched for stalls: a stall's report is no probe, and a probe
	// that hangs fails at its deadline.
	c.fate, c.outlierProbe, c.unwatched = recorded, true, true
	return nil, true
}

func (b *Breaker) rejectOutlier(ctx context.Context, c *call, o outlierFact, retry time.Duration, reason string) error {
	b.tel.decision(ctx, c, coordinator.Reject, byOutlier)
	e := &OpenError{Scope: c.scope, State: coordinator.StateOpen, RetryAfter: retry, Reason: reason, Outlier: true}
	b.tel.rejected(ctx, c, e, byOutlier, o.cause)
	return e
}
