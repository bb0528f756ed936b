package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackPortsAreFree(t *testing.T) {
	for _, bus := range []bool{false, true} {
		port, err := Loopback(bus)
		if err != nil {
			t.Fatal(err)
		}
		ports := []int{port}
		if bus {
			ports = append(ports, port+10000)
		}
		for _, p := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Errorf("Loopback(%v) = %d: port %d is taken: %v", bus, port, p, err)
				continue
			}
			l.Close()
		}
	}
}
