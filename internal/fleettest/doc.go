// Package fleettest runs fleets for the fault tests: [Build] compiles the
// replica program (internal/cmd/cbfleet) once, [Start] runs replicas of it
// as separate OS processes and follows their reports, and [Server] is the
// dependency they call, a gRPC TestService whose failure rate, latency and
// holding of calls a test switches, and which counts what reached it.
package fleettest
