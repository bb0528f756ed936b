package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, deadline time.Duration) (time.Duration, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(deadline))
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("echo = %q", line)
	}
	return time.Since(start), err
}

func TestProxyFaults(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)

	if _, err := roundTrip(t, c, r, 5*time.Second); err != nil {
		t.Fatalf("plain round trip: %v", err)
	}

	p.SetLatency(30 * time.Millisecond)
	d, err := roundTrip(t, c, r, 5*time.Second)
	if err != nil {
		t.Fatalf("round trip with latency: %v", err)
	}
	if d < 60*time.Millisecond {
		t.Errorf("round trip with 30ms each way took %v, want >= 60ms", d)
	}
	p.SetLatency(0)

	p.Block()
	if _, err := roundTrip(t, c, r, 100*time.Millisecond); err == nil {
		t.Fatal("round trip went through a blocked proxy")
	}
	p.Unblock()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("data held while blocked: got %q, %v; want it delivered after Unblock", line, err)
	}

	p.Cut()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection survived Cut")
	}

	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(t, c2, bufio.NewReader(c2), 5*time.Second); err != nil {
		t.Fatalf("new connection after Cut: %v", err)
	}
}
