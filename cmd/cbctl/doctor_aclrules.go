package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// shardedRules are the grant's rules for sharded pub/sub, commands that
// came with Redis 7.0, as ACL DRYRUN did: a server without DRYRUN lacks
// them too, and refuses to grant them (docs/redis-acl.md).
var shardedRules = map[string]bool{"+spublish": true, "+ssubscribe": true, "+sunsubscribe": true, "+pubsub|shardnumsub": true}

// aclUser is a user as ACL GETUSER describes it on Redis 6: its command
// rules in the order they apply ("-@all +@scripting -script +hget"),
// and its key and channel patterns.
type aclUser struct {
	commands []string
	keys     []string
	channels []string
}

// getUser reads user with ACL GETUSER, or fails with errNoUser.
func getUser(ctx context.Context, n *goredis.Client, user string) (aclUser, error) {
	var u aclUser
	reply, err := n.Do(ctx, "ACL", "GETUSER", user).Result()
	if err == goredis.Nil {
		return u, fmt.Errorf("ACL GETUSER %s: %w", user, errNoUser)
	}
	if err != nil {
		return u, err
	}
	// A map in RESP3, a flat list of pairs in RESP2.
	fields := map[string]any{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			fields[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			fields[fmt.Sprint(r[i])] = r[i+1]
		}
	default:
		return u, fmt.Errorf("unexpected reply %v", reply)
	}
	u.commands, u.keys, u.channels = words(fields["commands"]), words(fields["keys"]), words(fields["channels"])
	return u, nil
}

// words reads a field of ACL GETUSER as rules or patterns: Redis 6 lists
// the patterns, Redis 7 gives them as one string of rules ("~cbgrpc:*").
func words(v any) []string {
	var out []string
	switch v := v.(type) {
	case string:
		out = strings.Fields(v)
	case []any:
		for _, e := range v {
			out = append(out, fmt.Sprint(e))
		}
	}
	for i, w := range out {
		out[i] = strings.TrimLeft(w, "~&")
	}
	return out
}

// allows reports whether the user's command rules, applied in order,
// leave it the command rule names ("+hset", "+cluster|slots"); category
// lists the commands of a category (ACL CAT).
func (u aclUser) allows(rule string, category func(string) (map[string]bool, error)) (bool, error) {
	cmd, sub, _ := strings.Cut(strings.TrimPrefix(rule, "+"), "|")
	allowed := false
	for _, r := range u.commands {
		grant := strings.HasPrefix(r, "+")
		name := strings.ToLower(strings.TrimLeft(r, "+-"))
		switch {
		case r == "allcommands" || r == "nocommands":
			allowed = r == "allcommands"
		case name == "@all":
			allowed = grant
		case strings.HasPrefix(name, "@"):
			in, err := category(name[1:])
			if err != nil {
				return false, err
			}
			if in[cmd] {
				allowed = grant
			}
		case name == cmd || sub != "" && name == cmd+"|"+sub:
			allowed = grant
		}
	}
	return allowed, nil
}

// aclCategories returns a function that lists the commands of a category,
// as ACL CAT on n answers, asking once for each.
func aclCategories(ctx context.Context, n *goredis.Client) func(string) (map[string]bool, error) {
	categories := map[string]map[string]bool{}
	return func(name string) (map[string]bool, error) {
		if in, ok := categories[name]; ok {
			return in, nil
		}
		cmds, err := n.Do(ctx, "ACL", "CAT", name).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("ACL CAT %s: %w", name, err)
		}
		in := map[string]bool{}
		for _, c := range cmds {
			in[strings.ToLower(c)] = true
		}
		categories[name] = in
		return in, nil
	}
}

// allowed is what of g (beyond's rules) the user may do, named by
// beyondName: a "~" or "&" rule when one of its key or channel patterns
// does not start with prefix.
func (u aclUser) allowed(ctx context.Context, n *goredis.Client, g []grantCommand, prefix string) ([]string, error) {
	outside := func(patterns []string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { return !strings.HasPrefix(p, prefix) })
	}
	category := aclCategories(ctx, n)
	var allowed []string
	for _, c := range g {
		ok := false
		switch c.rule[0] {
		case '~':
			ok = outside(u.keys)
		case '&':
			ok = outside(u.channels)
		default:
			var err error
			if ok, err = u.allows(c.rule, category); err != nil {
				return nil, err
			}
		}
		if ok {
			allowed = append(allowed, beyondName(c.rule))
		}
	}
	return allowed, nil
}

// denied is what of the grant g on prefix the user lacks, as the words
// of the grant: its command rules, and its key and channel patterns when
// they leave out a name under prefix. The rules of sharded pub/sub are
// left out.
func (u aclUser) denied(ctx context.Context, n *goredis.Client, g []grantCommand, prefix string) ([]string, error) {
	category := aclCategories(ctx, n)
	var denied []string
	for _, c := range g {
		if shardedRules[c.rule] {
			continue
		}
		ok, err := u.allows(c.rule, category)
		if err != nil {
			return nil, err
		}
		if !ok {
			denied = append(denied, c.rule)
		}
	}
	for _, p := range []struct {
		sigil    string
		patterns []string
	}{{"~", u.keys}, {"&", u.channels}} {
		if !matchesAny(p.patterns, prefix+"doctor") {
			denied = append(denied, fmt.Sprintf("%s%s* (it has %q)", p.sigil, prefix, p.patterns))
		}
	}
	return denied, nil
}

// matchesAny reports whether one of the glob patterns matches s.
func matchesAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if globMatch(p, s) {
			return true
		}
	}
	return false
}

// globMatch matches s against a pattern of Redis's glob: '*', '?' and
// '\' escapes; a '[' class is taken literally, which at worst reports a
// grant as missing. (path.Match would not let '*' match a '/'.)
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if globMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		case '\\':
			if len(pattern) > 1 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != pattern[0] {
				return false
			}
		}
		pattern, s = pattern[1:], s[1:]
	}
	return s == ""
}
