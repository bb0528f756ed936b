package main

import (
	"strings"
	"testing"
)

// Bad flags are usage errors that name the flag and say why.
func TestServeFlags(t *testing.T) {
	c := newCLI(t, "127.0.0.1:1")
	for _, u := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:0"}, `cbctl: serve: --listen "0.0.0.0:0": not a loopback address; serving beyond this machine needs --token (or $CBCTL_SERVE_TOKEN)`},
		{[]string{"serve", "--listen", ":8080"}, `--listen ":8080": not a loopback address`},
		{[]string{"serve", "--listen", "8080"}, `cbctl: serve: --listen "8080": want HOST:PORT: `},
		{[]string{"serve", "--token", "short"}, "cbctl: serve: --token (or $CBCTL_SERVE_TOKEN): 5 characters; want at least 16"},
		{[]string{"serve", "--refresh", "1ms"}, "cbctl: serve: --refresh 1ms: want at least 100ms"},
		{[]string{"serve", "--failure-ratio", "2"}, "cbctl: serve: --failure-ratio 2 --min-calls 20: "},
		{[]string{"serve", "--replica-timeout", "1h"}, "cbctl: serve: --replica-timeout 1h0m0s: want at least 1ms, and less than --timeout 10s"},
		{[]string{"serve", "now"}, `cbctl: serve: serve takes no argument, got ["now"]`},
		{[]string{"serve", "--reason", "x"}, "cbctl: serve: flag provided but not defined: --reason"},
	} {
		c.want(2, "", u.stderr, u.args...)
	}
	newCLI(t, "127.0.0.1:1", tokenEnv+"=short").want(2, "", "--token (or $CBCTL_SERVE_TOKEN): 5 characters", "serve")
	r := c.want(0, "usage: cbctl serve [flags] [--listen HOST:PORT]\n", "", "serve", "--help")
	for _, want := range []string{"  --listen HOST:PORT", "  --token TOKEN", "  --read-only", "  --refresh D", "CBCTL_SERVE_TOKEN"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, r.stdout)
		}
	}
	if m := oneDashFlag.FindString(r.stdout); m != "" {
		t.Errorf("serve --help writes a flag with one dash: %q", m)
	}
	c.want(0, "  serve [--listen HOST:PORT]             a live dashboard", "", "help")
}
