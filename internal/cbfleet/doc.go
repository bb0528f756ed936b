// Package cbfleet is one replica of a fleet in the fault tests: a gRPC
// client that runs TestService calls through a [cbgrpc.Breaker] over the
// Redis coordinator (or, for contrast, a coordinator of its own) and
// reports what happened as JSON lines. The program internal/cmd/cbfleet
// runs it as a separate OS process, so that each replica has its own
// Breaker, its own Redis connections and can be killed.
//
// A [Config] is both the program's flags ([Config.Args] writes them,
// [ParseFlags] reads them). [Run] is driven by lines on its input:
//
//	run          callers call continuously
//	calls N      callers make N more calls between them, then wait
//	hold         callers stop after the call they are in
//	phase NAME   report the phase that ends, with latency percentiles, and start NAME
//	quit         stop calling, Close the Breaker, report, return (also on end of input)
//
// Every report is one [Report] line on the output: "ready" once, "tick"
// every Config.Report, "policy" when the policies in force change, "phase"
// when a phase ends, "closed" at the end.
package cbfleet
