package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
)

// Under the retry interceptor's default codes, a call the breaker rejects
// is attempted three times, rejected three times: rejections are
// Unavailable.
func TestRetryByDefaultRetriesRejectedCall(t *testing.T) {
	trip, open, err := try(byDefault)
	if err != nil {
		t.Fatal(err)
	}
	if trip.attempts != 3 || trip.served != 3 {
		t.Errorf("the call that trips: %v; want 3 attempts, all reaching the dependency", trip)
	}
	if open.attempts != 3 || open.rejected != 3 || open.served != 0 {
		t.Errorf("a call while open: %v; want 3 attempts, all rejected", open)
	}
	if !errors.Is(open.err, cbgrpc.ErrOpen) {
		t.Errorf("a call while open returned %v; want a rejection", open.err)
	}
}

// With cbgrpc.RetryOn, the dependency's own Unavailable is still retried,
// and a rejected call is attempted once.
func TestRetryOnAttemptsRejectedCallOnce(t *testing.T) {
	trip, open, err := try(withRetryOn)
	if err != nil {
		t.Fatal(err)
	}
	if trip.attempts != 3 || trip.served != 3 {
		t.Errorf("the call that trips: %v; want 3 attempts, all reaching the dependency", trip)
	}
	if open.attempts != 1 || open.rejected != 1 || open.served != 0 {
		t.Errorf("a call while open: %v; want 1 attempt, rejected", open)
	}
	if !errors.Is(open.err, cbgrpc.ErrOpen) || status.Code(open.err) != codes.Unavailable {
		t.Errorf("a call while open returned %v; want a rejection, Unavailable", open.err)
	}
}

// The example prints both setups, each with the one-line fix spelled out.
func TestRetryDemoPrintsBothSetups(t *testing.T) {
	var out bytes.Buffer
	if err := demo(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"opts: retry.WithMax(3)\n",
		"opts: retry.WithMax(3), retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...))\n",
		"a call, breaker open:   3 attempts: 0 reached the dependency, 3 rejected by the breaker",
		"a call, breaker open:   1 attempt: 0 reached the dependency, 1 rejected by the breaker",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the example does not print %q:\n%s", want, &out)
		}
	}
}
