package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestDefaultAddrIsSaid: told no address, cbctl says on standard error
// which one it connects to, once, and that it is the default; standard
// output is the command's alone. Told one, by flag or environment, it says
// nothing.
func TestDefaultAddrIsSaid(t *testing.T) {
	srv := redistest.Start(t)
	defer func(addr string) { defaultAddr = addr }(defaultAddr)
	defaultAddr = srv.Addr()
	said := "cbctl: no --addr or CBCTL_REDIS_ADDR given: using the default " + srv.Addr() + "\n"
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no address", []string{"list"}, nil, said},
		{"no address, JSON", []string{"list", "--json"}, nil, said},
		{"the flag after the command", []string{"list", "--addr", srv.Addr()}, nil, ""},
		{"the flag before the command", []string{"--addr", srv.Addr(), "list"}, nil, ""},
		{"the environment", []string{"list"}, map[string]string{"CBCTL_REDIS_ADDR": srv.Addr()}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), c.args, &stdout, &stderr, func(k string) string { return c.env[k] })
			if code != exitOK || stderr.String() != c.want {
				t.Errorf("cbctl %q: exit %d, stderr %q; want 0 and %q", c.args, code, stderr.String(), c.want)
			}
			if out := strings.TrimSpace(stdout.String()); !strings.HasPrefix(out, "SCOPE") && out != "[]" {
				t.Errorf("cbctl %q printed %q; want the empty list alone", c.args, out)
			}
		})
	}
}
