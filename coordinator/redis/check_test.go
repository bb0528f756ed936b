package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/freeport"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// userClient returns a client of s logged in as name with password.
func userClient(t *testing.T, s *redistest.Server, name, password string) *goredis.Client {
	rdb := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Username: name, Password: password, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestCheckNamesTheCause: each misconfiguration fails Check within its
// context, with words that name it and the error Redis or the network
// gave, and ErrorKind names its kind.
func TestCheckNamesTheCause(t *testing.T) {
	s := redistest.Start(t)
	s.SetUser(t, "cbgrpc", "right", redistest.ACLGrant)
	s.SetUser(t, "noevalsha", "right", strings.Replace(redistest.ACLGrant, "+evalsha ", "", 1))
	s.SetUser(t, "otherkeys", "right", strings.Replace(redistest.ACLGrant, "~cbgrpc:*", "~other:*", 1))
	s.SetUser(t, "nohset", "right", strings.Replace(redistest.ACLGrant, "+hset ", "", 1))
	s.SetUser(t, "otherchannels", "right", strings.Replace(redistest.ACLGrant, "&cbgrpc:*", "&other:*", 1))
	s.SetUser(t, "nonumsub", "right", strings.Replace(redistest.ACLGrant, "+pubsub|numsub ", "", 1))
	replica := redistest.StartReplica(t, s)
	port, err := freeport.Loopback(false)
	if err != nil {
		t.Fatal(err)
	}
	nobody := fmt.Sprintf("127.0.0.1:%d", port)

	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
		kind   string
		want   []string
	}{
		{"WrongAddress", goredis.NewClient(&goredis.Options{Addr: nobody, ContextTimeoutEnabled: true}),
			coordinator.KindUnreachable, []string{"cannot reach Redis at " + nobody, "connection refused"}},
		{"WrongClusterAddress", goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{nobody}, ContextTimeoutEnabled: true}),
			coordinator.KindUnreachable, []string{"cannot reach Redis at " + nobody, "connection refused"}},
		{"WrongPassword", userClient(t, s, "cbgrpc", "wrong"),
			coordinator.KindAuth, []string{"refused the credentials", "WRONGPASS"}},
		{"NoEvalsha", userClient(t, s, "noevalsha", "right"),
			coordinator.KindPermission, []string{"NOPERM", "evalsha", "docs/redis-acl.md"}},
		{"KeysOutsideTheGrant", userClient(t, s, "otherkeys", "right"),
			coordinator.KindPermission, []string{"NOPERM", "key", "docs/redis-acl.md"}},
		{"NoHset", userClient(t, s, "nohset", "right"),
			coordinator.KindPermission, []string{"NOPERM", "HSET", "docs/redis-acl.md"}},
		{"ChannelsOutsideTheGrant", userClient(t, s, "otherchannels", "right"),
			coordinator.KindPermission, []string{"NOPERM", "PUBLISH", "docs/redis-acl.md"}},
		{"NoPubsubNumsub", userClient(t, s, "nonumsub", "right"),
			coordinator.KindPermission, []string{"NOPERM", "PUBSUB NUMSUB", "docs/redis-acl.md"}},
		{"Replica", replica.Client(t),
			coordinator.KindReadOnly, []string{replica.Addr() + " is a read-only replica, not a master (READONLY)", s.Addr()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.Close()
			c := cbredis.New(tc.client)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			err := c.Check(ctx)
			if err == nil {
				t.Fatal("Check: nil")
			}
			t.Log(err)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Check took %v", d)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v\nwant it to say %q", err, w)
				}
			}
			if got := c.ErrorKind(err); got != tc.kind {
				t.Errorf("ErrorKind(%v) = %q, want %q", err, got, tc.kind)
			}
		})
	}
}

// TestErrorKindOfOperations: the errors of the operations themselves get
// the kind of their cause, which the Breaker's telemetry reports.
func TestErrorKindOfOperations(t *testing.T) {
	s := redistest.Start(t)
	s.SetUser(t, "cbgrpc", "right", redistest.ACLGrant)
	s.SetUser(t, "nohset", "right", strings.Replace(redistest.ACLGrant, "+hset ", "", 1))
	replica := redistest.StartReplica(t, s)
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
		kind   string
	}{
		{"WrongPassword", userClient(t, s, "cbgrpc", "wrong"), coordinator.KindAuth},
		{"NoHset", userClient(t, s, "nohset", "right"), coordinator.KindPermission},
		{"Replica", replica.Client(t), coordinator.KindReadOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cbredis.New(tc.client)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: tripPolicy(), Claim: "c"})
			if err == nil {
				t.Fatal("Admit: nil")
			}
			t.Log(err)
			if got := c.ErrorKind(err); got != tc.kind {
				t.Errorf("ErrorKind(%v) = %q, want %q", err, got, tc.kind)
			}
		})
	}
}
