package bench

import (
	"context"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// tripServer is the dependency of a trip run with Stream: a gRPC server on
// loopback whose StreamingOutputCall answers as the request says (see
// [answer.request]), with one message at most.
type tripServer struct {
	addr string
	srv  *grpc.Server
}

func startTripServer() (*tripServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// Stop waits for the handlers, so that a run leaves none behind.
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	testgrpc.RegisterTestServiceServer(srv, streamAnswers{})
	go srv.Serve(l)
	return &tripServer{addr: l.Addr().String(), srv: srv}, nil
}

func (s *tripServer) stop() { s.srv.Stop() }

// dial connects to the server, as a replica's process would.
func (s *tripServer) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// streamAnswers serves StreamingOutputCall only.
type streamAnswers struct {
	testgrpc.UnimplementedTestServiceServer
}

func (streamAnswers) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	a := answerOf(req)
	if err := a.wait(stream.Context()); err != nil {
		return err
	}
	if a.fail {
		return errDependency
	}
	return stream.Send(&testgrpc.StreamingOutputCallResponse{})
}

// request is a as the stream's request says it: a failure as the status
// to end with, the time to take as the interval before the one message,
// and a hang as no message asked for.
func (a answer) request() *testgrpc.StreamingOutputCallRequest {
	req := &testgrpc.StreamingOutputCallRequest{}
	if a.hang {
		return req
	}
	req.ResponseParameters = []*testgrpc.ResponseParameters{{IntervalUs: int32((a.latency + a.slow).Microseconds())}}
	if a.fail {
		req.ResponseStatus = &testgrpc.EchoStatus{Code: int32(codes.Unavailable)}
	}
	return req
}

// answerOf reads what request wrote; the time taken is all latency.
func answerOf(req *testgrpc.StreamingOutputCallRequest) answer {
	params := req.GetResponseParameters()
	if len(params) == 0 {
		return answer{hang: true}
	}
	return answer{fail: req.GetResponseStatus().GetCode() != 0, latency: time.Duration(params[0].GetIntervalUs()) * time.Microsecond}
}

// stream makes the call as a server-streaming call over cc through the
// interceptor call, and reads the stream to its end, calling let when the
// call is let through. It hangs while it waits for the first message.
func (a answer) stream(ctx context.Context, call grpc.StreamClientInterceptor, cc *grpc.ClientConn, let func()) error {
	desc := &testgrpc.TestService_ServiceDesc.Streams[0]
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		let()
		return cc.NewStream(ctx, desc, method, opts...)
	}
	cs, err := call(ctx, desc, cc, testgrpc.TestService_StreamingOutputCall_FullMethodName, streamer)
	if err != nil {
		return err
	}
	// As the generated client sends a server-streaming call's request.
	if err := cs.SendMsg(a.request()); err != nil && err != io.EOF {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		var m testgrpc.StreamingOutputCallResponse
		if err := cs.RecvMsg(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
