// Package faults proves that a fleet-wide breaker keeps protecting its
// dependency while Redis, the network or a replica fails. Its tests start
// replicas as separate OS processes (internal/cmd/cbfleet, through
// internal/fleettest) against a real redis-server and a gRPC server in the
// test, break things, and log the figures each scenario is judged by:
// failing calls the dependency absorbed, probes it saw at once, the
// latency a fault added, outcomes dropped.
//
// The package also runs the Redis coordinator as a Redis user with only
// the grant docs/redis-acl.md documents, and checks the Breaker's answers
// to bad input: panicking scope functions and classifiers, a nil
// coordinator, a Redis key of the wrong type.
package faults
