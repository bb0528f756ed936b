package redis

import (
	"strings"
	"testing"
)

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the next '}' when not empty, else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

func FuzzScopeKeys(f *testing.F) {
	for _, s := range []string{"", "a", "{", "}", "{}", "a{b}c", "}{", "svc|/pkg.Svc/Method", "\x00\n\xff", "ünïcode"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := scopeKeys(DefaultPrefix, a), scopeKeys(DefaultPrefix, b)
		tag := hashTag(ka[0])
		if len(tag) != 64 || strings.ContainsAny(tag, "{}") {
			t.Fatalf("scope %q: hash tag %q is not a digest", a, tag)
		}
		seen := map[string]bool{}
		for _, k := range ka {
			if !strings.HasPrefix(k, DefaultPrefix) || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Fatalf("scope %q: key %q has not exactly one hash tag after the prefix", a, k)
			}
			if hashTag(k) != tag {
				t.Fatalf("scope %q: key %q hashes as %q, not %q: another slot", a, k, hashTag(k), tag)
			}
			seen[k] = true
		}
		if len(seen) != len(ka) {
			t.Fatalf("scope %q: keys repeat: %q", a, ka)
		}
		if a == b {
			return
		}
		for _, k := range kb {
			if seen[k] {
				t.Fatalf("scopes %q and %q share key %q", a, b, k)
			}
		}
	})
}
