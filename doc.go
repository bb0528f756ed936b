// Package cbgrpc gives a fleet of gRPC clients one circuit breaker per
// dependency. Client interceptors derive a scope from each call, ask a
// shared coordinator (Redis for a fleet, or in-process) to admit or reject
// it, classify the gRPC status as success or failure, and record outcomes
// off the call's path.
package cbgrpc
