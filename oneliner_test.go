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
// them, makes a unary call and a stream, checks that c's one Breaker is
// shared, and closes the connection; it reports how many goroutines of
// ours run meanwhile.
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
	o, held := shared.m[c].Value(), len(shared.m)
	shared.Unlock()
	if o == nil || held != 1 {
		t.Fatalf("%d coordinators share a Breaker, this one's %v, while its interceptors are in use; want this one's alone", held, o)
	}
	if u, s := oneLinerOf("Unary", c, nil), oneLinerOf("Stream", c, nil); u != o || s != o {
		t.Errorf("Unary(c) and Stream(c) would get %p and %p; want the Breaker their interceptors share, %p", u, s, o)
	}
	return len(goroutinesSince(before))
}

// TestOneLinersShareOneBreakerAndEndWithIt: Unary(c) and Stream(c) make
// one Breaker, and once the connection that
// held them is closed and dropped, the Breaker is closed, no goroutine of
// it is left, and it is no longer shared.
func TestOneLinersShareOneBreakerAndEndWithIt(t *testing.T) {
	addr := serveTest(t, &service{})
	before := ourGoroutines()
	if n := oneLinerCall(t, addr, before); n == 0 {
		t.Fatal("no goroutine of a Breaker ran while the one-liners were in use")
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
