// Package cbgrpc gives a fleet of gRPC clients one circuit breaker per
// dependency. Client interceptors derive a scope from each call, ask a
// shared coordinator (Redis for a fleet, or in-process) to admit or reject
// it, classify the gRPC status as success or failure, and record outcomes
// off the call's path, so every replica sees the same state, the fleet trips
// once, and recovery is probed with a fleet-wide budget.
//
// To start, give a [coordinator.Coordinator] to the dial options:
//
//	coord := cbredis.New(rdb) // or memory.New() for one process
//	conn, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(cbgrpc.Unary(coord)),
//		grpc.WithStreamInterceptor(cbgrpc.Stream(coord)),
//	)
//
// or make one [Breaker] with [New] to share it between unary and stream
// calls (and across ClientConns), get option errors instead of a panic, and
// [Breaker.Close] it on shutdown to flush the outcomes still waiting.
//
// What a Breaker does with a call:
//
//   - Scope: [WithScope] names the breaker of a call; by default each
//     method of each target has its own ([ScopeByMethod]). An empty scope,
//     and the methods left out by [WithExcludedMethods] (health checks and
//     reflection always are), leave a call unprotected.
//   - Admission: the coordinator answers Allow (closed), Probe (one of the
//     half-open probe slots) or Reject. A rejected call returns an error
//     matching [ErrOpen], with gRPC status Unavailable, without reaching the
//     network. Admission waits at most [WithCoordinatorTimeout]. What the
//     process knows of each scope is one table, ordered by generation, that
//     every answer of the coordinator goes through. Over a coordinator with
//     a transition feed (both of this module's), a scope known closed is
//     admitted, and one known open rejected, without a round trip: see
//     [WithAdmissionCache]. A scope with no call for a whole window is
//     forgotten, so memory is bounded by the scopes in use.
//   - Classification: when the call ends, a [Classifier] says whether it was
//     a [Success], a [Failure] or says nothing ([Ignore]); see
//     [DefaultClassifier] and [FailOn].
//   - Per call: [CallScope], [Unprotected] and [CallClassifier] are
//     grpc.CallOptions that choose one call's scope, leave it outside the
//     breaker, or classify its outcome. [WithFallback] turns a rejected
//     unary call into a cached or default answer, never counted as an
//     outcome.
//   - Recording: outcomes go to the coordinator in the background, batched
//     per scope; a probe's outcome settles its slot. A call never waits
//     for, or fails because of, recording.
//   - Coordinator failure: scopes this process last saw open or half-open
//     are rejected while the coordinator is unreachable; other scopes follow
//     [WithCoordinatorFailure] ([FailOpen] by default). After a failure the
//     coordinator is left alone for [WithCoordinatorBackoff].
//   - Telemetry: every transition this process causes is a span
//     (cbgrpc.transition) in the trace of the call that caused it; a
//     rejected call gets a client span of its own ([WithRejectedCallSpans]);
//     a rejection and a decision taken without the coordinator are events
//     on the caller's span; metrics count decisions, transitions, dropped
//     outcomes, and coordinator latency and errors, and a gauge
//     (cbgrpc.state) counts the scopes in each state. See [WithTracerProvider],
//     [WithMeterProvider] and [WithName]. [WithOnTransition] calls a function of yours
//     with every transition this process learns of.
package cbgrpc
