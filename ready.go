package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Ready reports whether the coordinator can serve, for a program to check
// at start-up: the coordinator's Check ([coordinator.Checker]; for Redis,
// whether it is reachable, takes the credentials, grants what the scripts
// need and is a master), or nil when it has none. It returns when ctx
// ends, even if the coordinator ignores deadlines, and fails with
// [ErrShut] once the Breaker is shut.
func (b *Breaker) Ready(ctx context.Context) error {
	ch, ok := b.c.(coordinator.Checker)
	if !ok {
		return nil
	}
	if !b.enter() {
		return ErrShut
	}
	defer b.admits.Done()
	if err := b.check(ctx, ch); err != nil {
		return fmt.Errorf("cbgrpc: Ready: %w", err)
	}
	return nil
}

// check runs ch's Check as every coordinator call runs (attempt): bounded
// by ctx whatever the coordinator does with it, a panic turned into an
// error. The caller has entered (b.enter).
func (b *Breaker) check(ctx context.Context, ch coordinator.Checker) error {
	_, err := b.attempt(ctx, &b.admits, func(ctx context.Context) (answer, error) { return answer{}, ch.Check(ctx) })
	return err
}

// checkTimeout bounds the check made when the coordinator starts failing.
const checkTimeout = time.Second

// complain reports a coordinator error to otel.Handle when it is the first
// of its kind since the coordinator last worked. One scope's unusable data
// is no failure of the coordinator. A coordinator with a Check is checked
// first, in the background: a go-redis client reports a refused
// connection as a timeout, which the check tells apart.
func (b *Breaker) complain(err error) {
	if errors.Is(err, coordinator.ErrCorruptState) {
		return
	}
	kind := errorKind(err)
	if !b.health.Complain(kind) {
		return
	}
	ch, ok := b.c.(coordinator.Checker)
	if !ok || !b.enter() {
		otel.Handle(failing(kind, err, nil))
		return
	}
	go func() {
		defer b.admits.Done()
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		otel.Handle(failing(kind, err, b.check(ctx, ch)))
	}()
}

// failing is the report of err, of kind, with what the coordinator's check
// said, in words, if it failed too.
func failing(kind string, err, check error) error {
	if check == nil {
		return fmt.Errorf("cbgrpc: coordinator failing (%s): %w", kind, err)
	}
	return fmt.Errorf("cbgrpc: coordinator failing (%s): %w; its check: %w", kind, err, check)
}

// kindError carries the coordinator's name for the cause of its error
// ([coordinator.ErrorKinds]) to errorKind.
type kindError struct {
	kind string
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// kinded wraps err with the coordinator's kind for it, if it names one.
func (b *Breaker) kinded(err error) error {
	if k, ok := b.c.(coordinator.ErrorKinds); ok && err != nil {
		if kind := k.ErrorKind(err); kind != "" {
			return &kindError{kind: kind, err: err}
		}
	}
	return err
}
