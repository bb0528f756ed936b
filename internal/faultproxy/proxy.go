// Package faultproxy is a TCP proxy on loopback for fault tests: it sits
// between a client and a server (Redis, in this project's tests) and can
// add latency, stop forwarding, or cut every connection, on demand.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	target string
	l      net.Listener

	mu      sync.Mutex
	latency time.Duration
	blocked bool
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, l: l, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetLatency delays every chunk of data, in both directions, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Block stops forwarding data and refuses new connections (they are
// accepted and held silent), the way a partitioned network behaves; Unblock
// resumes. Data that arrives while blocked is held, not lost.
func (p *Proxy) Block() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
}

// Unblock resumes forwarding after Block.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
}

// Cut closes every open connection; new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy, cuts every connection and waits for its
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.l.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		client.Close()
		server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
}

// pipe copies src to dst, applying the current faults to each chunk, and
// closes both ends when either side ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait applies latency and blocking to one chunk; false when the proxy
// closed meanwhile.
func (p *Proxy) wait() bool {
	for {
		p.mu.Lock()
		latency, blocked, closed := p.latency, p.blocked, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if !blocked {
			if latency > 0 {
				time.Sleep(latency)
			}
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
}
