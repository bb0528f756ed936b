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
	"+publish +spublish +subscribe +ssubscribe +unsubscribe +sunsubscribe +pubsub|numsub +pubsub|shardnumsub +ping +info +wait"

// SetUser creates (or resets) the ACL user name with password and
// exactly the rules of grant, ACL SETUSER words separated by spaces
// ("resetkeys ~cbgrpc:* -@all +evalsha"), but for the grants of commands
// the server lacks, which it would refuse: as docs/redis-acl.md tells the
// users of Redis 6.2, which has no sharded pub/sub, to leave them out.
func (s *Server) SetUser(t testing.TB, name, password, grant string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + password}
	for _, w := range strings.Fields(grant) {
		if cmd, ok := strings.CutPrefix(w, "+"); ok && !s.has(t, cmd) {
			continue
		}
		args = append(args, w)
	}
	if err := s.rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER %s on %s: %v", name, s.Addr(), err)
	}
}

// has reports whether the server knows the command cmd (a name, no
// category or subcommand).
func (s *Server) has(t testing.TB, cmd string) bool {
	t.Helper()
	if strings.ContainsAny(cmd, "@|") {
		return true
	}
	info, err := s.rdb.Do(context.Background(), "COMMAND", "INFO", cmd).Slice()
	if err != nil {
		t.Fatalf("redistest: COMMAND INFO %s on %s: %v", cmd, s.Addr(), err)
	}
	return len(info) == 1 && info[0] != nil
}

// StartReplica starts a server that replicates master, once its first
// sync is done.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	r := Start(t)
	replicate(t, r, master)
	return r
}
