package cbgrpc

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// oneLinerCall dials addr with Unary(c) and Stream(c) as the card shows
// them, makes a unary call and a stream, and closes the connection; it
// reports how many Breakers the one-liners made, by the goroutines that
// started.
func oneLinerCall(t *testing.T, addr string, before map[string]string) int {
	t.Helper()
	c := memory.New()
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(Unary(c)),
		grpc.WithStreamInterceptor(Stream(c)),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	s, err := client.StreamingOutputCall(context.Background(), &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
	shared.Lock()
	o := shared.m[c].Value()
	shared.Unlock()
	if o == nil {
		t.Fatal("no Breaker shared for the coordinator while its interceptors are in use")
	}
	return len(goroutinesSince(before))
}

// TestOneLinersShareOneBreakerAndEndWithIt: Unary(c) and Stream(c) make
// one Breaker, with the goroutines of one, and once the connection that
// held them is closed and dropped, the Breaker is closed, no goroutine of
// it is left, and it is no longer shared.
func TestOneLinersShareOneBreakerAndEndWithIt(t *testing.T) {
	addr := serveTest(t, &service{})
	before := ourGoroutines()
	n := oneLinerCall(t, addr, before)

	// A Breaker made by New, before any call, has this many goroutines;
	// one that made calls may have a few more (a Record in flight), two
	// have twice as many.
	b, err := New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	one := len(goroutinesSince(before)) - n
	b.Close()
	if n >= 2*one {
		t.Errorf("Unary and Stream over one coordinator started %d goroutines; one Breaker has %d: two Breakers", n, one)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		shared.Lock()
		left := len(shared.m)
		shared.Unlock()
		if len(goroutinesSince(before)) == 0 && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			checkNoGoroutines(t, before)
			t.Fatalf("%d coordinators still share a Breaker after their connection was closed and dropped", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOneLinersWithOptionsMakeTheirOwn: with options, each one-liner makes
// a Breaker of its own, as the godoc says.
func TestOneLinersWithOptionsMakeTheirOwn(t *testing.T) {
	c := memory.New()
	a := oneLinerOf("Unary", c, []Option{WithQueueSize(10)})
	b := oneLinerOf("Stream", c, []Option{WithQueueSize(10)})
	s, s2 := oneLinerOf("Unary", c, nil), oneLinerOf("Stream", c, nil)
	if a == b || a == s || s != s2 {
		t.Errorf("one-liners: with options %p and %p, without %p and %p; want the two without shared, the two with their own", a, b, s, s2)
	}
	for _, o := range []*oneLiner{a, b, s} {
		o.b.Close()
	}
}
