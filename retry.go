package cbgrpc

import (
	"errors"

	"google.golang.org/grpc/codes"
)

// RetryOn returns a predicate for a retry interceptor placed outside (before)
// the Breaker: it reports whether a failed call may be tried again, which
// holds for an error with one of the given codes unless a Breaker rejected
// the call. A rejection carries Unavailable, a code retry interceptors retry
// by default, but trying again before the breaker lets calls through only
// meets another rejection: [OpenError.RetryAfter] says how long that is.
//
// With go-grpc-middleware v2's retry interceptor, keeping its default codes:
//
//	retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...))
func RetryOn(retriable ...codes.Code) func(err error) bool {
	set := make(map[codes.Code]bool, len(retriable))
	for _, c := range retriable {
		set[c] = true
	}
	return func(err error) bool {
		return err != nil && !errors.Is(err, ErrOpen) && set[codeOf(err)]
	}
}
