package main

import (
	"strings"
	"testing"
)

// The rules ACL GETUSER gives on Redis 6 apply in order, categories
// included, as Redis applies them.
func TestACLRulesApplyInOrder(t *testing.T) {
	categories := map[string]map[string]bool{
		"scripting": {"eval": true, "evalsha": true, "script": true},
		"pubsub":    {"publish": true, "subscribe": true},
	}
	category := func(name string) (map[string]bool, error) { return categories[name], nil }
	for _, tc := range []struct {
		commands string
		rule     string
		want     bool
	}{
		{"+@all", "+info", true},
		{"allcommands -info", "+info", false},
		{"-@all +@scripting -script", "+eval", true},
		{"-@all +@scripting -evalsha", "+evalsha", false},
		{"-@all +@pubsub", "+publish", true},
		{"-@all +@pubsub -@all", "+publish", false},
		{"-@all +hget", "+hgetall", false},
		{"-@all +cluster|slots", "+cluster|slots", true},
		{"-@all +cluster|nodes", "+cluster|slots", false},
		{"-@all +cluster", "+cluster|slots", true},
		{"", "+ping", false},
	} {
		u := aclUser{commands: words(tc.commands)}
		if got, err := u.allows(tc.rule, category); err != nil || got != tc.want {
			t.Errorf("%q allows %s = %v, %v; want %v", tc.commands, tc.rule, got, err, tc.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "cbgrpc:doctor", true},
		{"cbgrpc:*", "cbgrpc:doctor", true},
		{"app/cb:*", "app/cb:doctor", true},
		{"cbgrpc:*", "other:doctor", false},
		{"cb?rpc:*", "cbgrpc:doctor", true},
		{"cbgrpc\\*", "cbgrpc:doctor", false},
		{"cbgrpc:doctor", "cbgrpc:doctor", true},
		{"cbgrpc:doc", "cbgrpc:doctor", false},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v; want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// On Redis 6, what a user holds beyond the grant is read from its rules
// and patterns as ACL GETUSER gives them.
func TestACLRulesBeyondTheGrant(t *testing.T) {
	for _, tc := range []struct {
		commands, keys, channels string
		want                     string
	}{
		{"-@all +evalsha +hget", "cbgrpc:*", "cbgrpc:*", ""},
		{"-@all +evalsha +flushall +config", "cbgrpc:*", "cbgrpc:*", "FLUSHALL CONFIG SET"},
		{"-@all +evalsha", "*", "cbgrpc:*", "keys outside cbgrpc:*"},
		{"-@all +evalsha", "cbgrpc:* other:*", "*", "keys outside cbgrpc:* channels outside cbgrpc:*"},
		{"-@all +script|flush +acl|setuser", "cbgrpc:*", "cbgrpc:*", "SCRIPT FLUSH ACL SETUSER"},
	} {
		u := aclUser{commands: words(tc.commands), keys: words(tc.keys), channels: words(tc.channels)}
		got, err := u.allowed(nil, nil, beyond("cbgrpc:"), "cbgrpc:")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%q on keys %q and channels %q holds beyond the grant %q; want %q", tc.commands, tc.keys, tc.channels, got, tc.want)
		}
	}
}
