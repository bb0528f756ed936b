package bench

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestTripStreamAnswers calls the stream dependency's server with each
// kind of answer: a healthy one sends one message and ends, a slow one
// too, a failing one ends Unavailable before any message, and a hung one
// withholds its first message until the call's deadline.
func TestTripStreamAnswers(t *testing.T) {
	before := tripGoroutines()
	server, err := startTripServer()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := server.dial()
	if err != nil {
		t.Fatal(err)
	}
	client := testgrpc.NewTestServiceClient(conn)
	for _, c := range []struct {
		name     string
		a        answer
		messages int
		code     codes.Code
	}{
		{"healthy", answer{}, 1, codes.OK},
		{"slow", answer{latency: 20 * time.Millisecond, slow: 10 * time.Millisecond}, 1, codes.OK},
		{"failing", answer{fail: true}, 0, codes.Unavailable},
		{"hung", answer{hang: true}, 0, codes.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := client.StreamingOutputCall(ctx, c.a.request())
			if err != nil {
				t.Fatal(err)
			}
			messages := 0
			for {
				if _, err = s.Recv(); err != nil {
					break
				}
				messages++
			}
			if err == io.EOF {
				err = nil
			}
			if messages != c.messages || status.Code(err) != c.code {
				t.Errorf("%d messages, then %v; want %d, then %v", messages, err, c.messages, c.code)
			}
		})
	}
	conn.Close()
	server.stop()
	noGoroutinesLeft(t, before)
}

// TestTripStreamRequest reads back what a request says of each answer.
func TestTripStreamRequest(t *testing.T) {
	for _, a := range []answer{{}, {latency: 3 * time.Millisecond}, {fail: true, latency: time.Second}, {hang: true}} {
		if got := answerOf(a.request()); got != a {
			t.Errorf("%+v read back as %+v", a, got)
		}
	}
}
