package cbgrpc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

func TestNewNilCoordinator(t *testing.T) {
	if _, err := New(nil); err == nil || !strings.Contains(err.Error(), "coordinator is nil") {
		t.Fatalf("New(nil) = %v, want an error saying the coordinator is nil", err)
	}
}

func TestNewNamesTheBadOption(t *testing.T) {
	bad := coordinator.DefaultPolicy()
	bad.Probes = 0
	for _, tt := range []struct {
		opt  Option
		want string
	}{
		{WithPolicy(bad), "Probes"},
		{WithCoordinatorTimeout(0), "WithCoordinatorTimeout"},
		{WithCoordinatorBackoff(-time.Second), "WithCoordinatorBackoff"},
		{WithRecordInterval(0), "WithRecordInterval"},
		{WithQueueSize(0), "WithQueueSize"},
		{WithCoordinatorFailure(FailurePolicy(7)), "WithCoordinatorFailure"},
		{WithName(""), "WithName"},
		{WithExcludedMethods("Check"), "WithExcludedMethods"},
	} {
		_, err := New(memory.New(), tt.opt)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%s) = %v, want an error naming %s", tt.want, err, tt.want)
		}
	}
	_, err := New(memory.New(), WithPolicy(bad))
	if !errors.Is(err, coordinator.ErrInvalidPolicy) {
		t.Errorf("invalid policy: %v does not wrap coordinator.ErrInvalidPolicy", err)
	}
}

func TestWithIgnoresNil(t *testing.T) {
	b := newBreaker(t, memory.New(), nil, WithScope(nil), WithClassifier(nil), WithTracerProvider(nil), WithMeterProvider(nil), WithOnTransition(nil))
	if b.cfg.scope == nil || b.cfg.classifier == nil || b.cfg.tp == nil || b.cfg.mp == nil {
		t.Fatal("a nil option replaced a default")
	}
	if b.notify.f != nil {
		t.Error("WithOnTransition(nil) set a callback")
	}
}

func TestShortcutsPanicOnBadOption(t *testing.T) {
	for name, f := range map[string]func(){
		"Unary":  func() { Unary(memory.New(), WithQueueSize(-1)) },
		"Stream": func() { Stream(nil) },
	} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "cbgrpc."+name+": ") {
					t.Errorf("%s: panic %q, want a message starting with cbgrpc.%s", name, msg, name)
				}
			}()
			f()
		}()
	}
}

func TestExcludedMethods(t *testing.T) {
	x := newConfig([]Option{WithExcludedMethods("/pkg.Svc/Skip", "/pkg.Other/")}).excluded
	for method, want := range map[string]bool{
		"/pkg.Svc/Skip":                 true,
		"/pkg.Svc/Keep":                 false,
		"/pkg.Other/Any":                true,
		"/grpc.health.v1.Health/Check":  true,
		"/grpc.health.v1.Health/Watch":  true,
		"/grpc.testing.TestService/Foo": false,
	} {
		if got := x.has(method); got != want {
			t.Errorf("excluded(%q) = %v, want %v", method, got, want)
		}
	}
}

func TestNewRejectsTypedNilCoordinator(t *testing.T) {
	var m *memory.Coordinator
	if _, err := New(m); err == nil || !strings.Contains(err.Error(), "nil *memory.Coordinator") {
		t.Fatalf("New(typed nil) = %v, want an error naming the nil coordinator", err)
	}
}
