// Package freeport finds loopback ports for the redis-server processes
// that tests, benchmarks and the fleet simulator start.
package freeport

import (
	"errors"
	"net"
	"strconv"
)

// Loopback returns a loopback port nobody listens on; with bus, one whose
// port+10000 is free too, for a Redis Cluster node's bus. Another process
// may take it before the caller binds it: callers try again.
func Loopback(bus bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		b.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port pair for a cluster node")
}
