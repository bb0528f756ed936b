package cbgrpc

import (
	"context"
	"io"
	"runtime"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Stream returns the stream client interceptor of a Breaker over c, for
// the dial-option one-liner: the Breaker [Unary](c) shares when neither
// has options, closed once no interceptor of it is reachable, as Unary
// says. It panics with a message naming the option when an option cannot
// work; use [New] to get the error instead.
func Stream(c coordinator.Coordinator, opts ...Option) grpc.StreamClientInterceptor {
	o := oneLinerOf("Stream", c, opts)
	call := o.b.StreamClientInterceptor()
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := call(ctx, desc, cc, method, streamer, opts...)
		runtime.KeepAlive(o)
		return s, err
	}
}

// StreamClientInterceptor returns the interceptor that protects streams.
// A stream is admitted when it is created and its outcome is taken once,
// when it ends, whichever way it ends: the stream fails to start, RecvMsg
// returns io.EOF or an error, RecvMsg returns the only response of a
// method that is not server-streaming, Header fails, SendMsg fails with
// anything but io.EOF, or the caller's context ends. Closing the send side
// is not the end. A stream abandoned without cancelling its context never
// ends: its outcome is never recorded, and if it was a probe its lease
// frees the slot. Per-call options ([CallScope], [Unprotected],
// [CallClassifier]) change how one stream is treated; a fallback
// ([WithFallback]) serves unary calls only.
func (b *Breaker) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		var c call
		if err := b.route(ctx, &c, cc, method, opts); err != nil {
			return nil, err
		}
		if c.scope == "" {
			return streamer(ctx, desc, cc, method, opts...)
		}
		c.unwatched = desc.ClientStreams
		if err := b.letThrough(&c, b.admit(ctx, &c)); err != nil {
			return nil, err
		}
		if c.fate == unprotected {
			return streamer(ctx, desc, cc, method, opts...)
		}
		end := &streamEnd{b: b, ctx: ctx, c: c}
		// gRPC calls OnFinish exactly when the RPC ends, including when the
		// caller's context ends; the wrapper below catches the ends that
		// an interceptor further down may produce without the RPC ending.
		opts = append(opts[:len(opts):len(opts)], grpc.OnFinish(end.done))
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			end.done(err)
			return nil, err
		}
		return &clientStream{ClientStream: cs, serverStreams: desc.ServerStreams, end: end}, nil
	}
}

// streamEnd takes a stream's outcome once.
type streamEnd struct {
	once     sync.Once
	pushOnce sync.Once
	b        *Breaker
	ctx      context.Context
	c        call
	// arrived makes the stream's arrival (its first message or header,
	// or its end: a stream is stalled only while it waits for either,
	// stall.go) happen once, whichever goroutine comes first.
	arrived sync.Once
}

func (e *streamEnd) done(err error) {
	e.once.Do(func() {
		e.arrive()
		e.b.finish(e.ctx, &e.c, err)
	})
}

// arrive notes that the stream's answer began.
func (e *streamEnd) arrive() {
	e.arrived.Do(func() { e.c.arrive(0) })
}

// statusRead takes the stream's status as RecvMsg returned it, with its
// trailer, for a server's pushback (pushback.go): gRPC's OnFinish may have
// taken the outcome already, without the trailer.
func (e *streamEnd) statusRead(err error, trailer func() metadata.MD) {
	e.done(err)
	if e.b.cfg.pushback != nil {
		e.pushOnce.Do(func() { e.b.pushedBack(e.ctx, e.c, err, trailer()) })
	}
}

type clientStream struct {
	grpc.ClientStream
	serverStreams bool
	end           *streamEnd
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.end.arrive()
	switch {
	case err == io.EOF:
		s.end.done(nil)
	case err != nil:
		s.end.statusRead(err, s.ClientStream.Trailer)
	case !s.serverStreams:
		// The one response of a unary-response method: the RPC is over
		// and succeeded.
		s.end.done(nil)
	}
	return err
}

func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	// io.EOF means the stream ended elsewhere; its status comes from
	// RecvMsg.
	if err != nil && err != io.EOF {
		s.end.done(err)
	}
	return err
}

func (s *clientStream) Header() (md metadata.MD, err error) {
	md, err = s.ClientStream.Header()
	s.end.arrive()
	if err != nil {
		s.end.done(err)
	}
	return md, err
}
