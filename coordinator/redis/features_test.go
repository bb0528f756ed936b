package redis

import (
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestLearnsThePubSubOfTheCluster: on a Cluster the coordinator takes
// sharded pub/sub exactly when the server has it (Redis 7.0 and later,
// Valkey), whatever redis-server the test runs.
func TestLearnsThePubSubOfTheCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	rdb := cluster.Client(t)
	c := New(rdb)
	ctx := context.Background()
	got, err := c.learn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	has := rdb.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Val()
	want := false
	if l, ok := has.([]any); ok && len(l) == 1 && l[0] != nil {
		want = true
	}
	t.Logf("learned %v", got)
	if got.sharded != want || !strings.Contains(info, got.version) {
		t.Errorf("learned %v; the server has SPUBLISH: %v", got, want)
	}
	if s, err := c.scriptSet(ctx); err != nil || s != plainScripts && !want || s != shardedScripts && want {
		t.Errorf("scriptSet = %p, %v; want the set that suits the server", s, err)
	}
}

func TestParseServer(t *testing.T) {
	for _, tc := range []struct{ info, want string }{
		{"# Server\r\nredis_version:6.2.16\r\nredis_git_sha1:00000000\r\n", "Redis 6.2.16 (PUBLISH)"},
		{"# Server\r\nredis_version:7.0.15\r\n", "Redis 7.0.15 (SPUBLISH)"},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "Valkey 8.0.1 (SPUBLISH)"},
		{"# Server\r\n", "Redis  (PUBLISH)"},
	} {
		if got := parseServer(tc.info).String(); got != tc.want {
			t.Errorf("parseServer(%q) = %q, want %q", tc.info, got, tc.want)
		}
	}
}

// subscribeLike subscribes rdb to channels of one slot with the pub/sub
// c's Watches use there: SSUBSCRIBE on a Cluster that has sharded pub/sub,
// else SUBSCRIBE (go-redis connects it to the master of the first
// channel's slot).
func subscribeLike(tb testing.TB, ctx context.Context, c *Coordinator, rdb goredis.UniversalClient, channels ...string) *goredis.PubSub {
	tb.Helper()
	srv, err := c.learn(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if srv.sharded {
		return rdb.SSubscribe(ctx, channels...)
	}
	return rdb.Subscribe(ctx, channels...)
}

// numsubLike counts the subscribers of channels on node, one master, in
// the pub/sub c's Watches use: PUBSUB SHARDNUMSUB on a Cluster that has
// sharded pub/sub, else PUBSUB NUMSUB.
func numsubLike(ctx context.Context, c *Coordinator, node *goredis.Client, channels ...string) (map[string]int64, error) {
	srv, err := c.learn(ctx)
	switch {
	case err != nil:
		return nil, err
	case srv.sharded:
		return node.PubSubShardNumSub(ctx, channels...).Result()
	}
	return node.PubSubNumSub(ctx, channels...).Result()
}
