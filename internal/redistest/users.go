package redistest

import (
	"context"
	"strings"
	"testing"
)

// ACLGrant is the grant docs/redis-acl.md documents for the Redis
// coordinator's user, word for word, for [Server.SetUser].
const ACLGrant = "resetkeys ~cbgrpc:* resetchannels &cbgrpc:* -@all " +
	"+evalsha +eval +time +hget +hgetall +hmget +hset +hdel +hvals +del +persist +pexpire " +
	"+publish +spublish +subscribe +ssubscribe +unsubscribe +sunsubscribe +ping +info +wait"

// SetUser creates (or resets) the ACL user name with password and
// exactly the rules of grant, ACL SETUSER words separated by spaces
// ("resetkeys ~cbgrpc:* -@all +evalsha").
func (s *Server) SetUser(t testing.TB, name, password, grant string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + password}
	for _, w := range strings.Fields(grant) {
		args = append(args, w)
	}
	if err := s.rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER %s on %s: %v", name, s.Addr(), err)
	}
}

// StartReplica starts a server that replicates master, once its first
// sync is done.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	r := Start(t)
	replicate(t, r, master)
	return r
}
