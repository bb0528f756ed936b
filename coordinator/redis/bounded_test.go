package redis

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

func TestHonoursDeadlinesFollowsTheClient(t *testing.T) {
	for _, c := range []struct {
		what   string
		client goredis.UniversalClient
		want   bool
	}{
		{"a client by default", goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}), false},
		{"a client with ContextTimeoutEnabled", goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{"a cluster client by default", goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"a cluster client with ContextTimeoutEnabled", goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"a ring", goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true}), false},
	} {
		defer c.client.Close()
		var b coordinator.Bounded = New(c.client)
		if got := b.HonoursDeadlines(); got != c.want {
			t.Errorf("%s: HonoursDeadlines() = %v, want %v", c.what, got, c.want)
		}
	}
	if !coordinator.Bounded(memory.New()).HonoursDeadlines() {
		t.Error("the memory coordinator: HonoursDeadlines() = false, want true")
	}
}
