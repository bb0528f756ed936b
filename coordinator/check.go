package coordinator

import "context"

// Checker is implemented by a coordinator that can say, without touching
// any scope, whether it can serve: it is reachable, accepts its
// credentials, may run what its operations need, and writes to a store
// that takes writes (a master, not a replica; not still loading). A
// program calls it at start-up, through the Breaker's Ready, to fail
// there rather than run every call unprotected.
type Checker interface {
	// Check returns nil when the coordinator can serve, else an error that
	// says in words what is wrong, wrapping the error it got.
	Check(ctx context.Context) error
}

// ErrorKinds is implemented by a coordinator that can name the cause of
// its errors for telemetry and for the reports of a failing coordinator.
type ErrorKinds interface {
	// ErrorKind returns the kind of cause of err, one of the Kind*
	// constants, or "" when it cannot tell.
	ErrorKind(err error) string
}

// The kinds of cause an [ErrorKinds] coordinator names.
const (
	KindUnreachable = "unreachable" // no connection: refused, reset, no route
	KindTimeout     = "timeout"     // no answer in time
	KindAuth        = "auth"        // the credentials were refused (WRONGPASS, NOAUTH)
	KindPermission  = "permission"  // the user may not run a command or touch a key (NOPERM)
	KindReadOnly    = "readonly"    // the store is a replica (READONLY)
	KindLoading     = "loading"     // the store is loading its data (LOADING)
	KindScript      = "script"      // the store refused or failed a script
)
