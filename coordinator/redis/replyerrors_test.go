package redis

import (
	"errors"
	"fmt"
	"io"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// replyError is an error reply as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ goredis.Error = replyError("")

// TestReplyKindOfEveryServer: the replies each server of the support
// matrix gave, word for word, get one class on every server.
func TestReplyKindOfEveryServer(t *testing.T) {
	for _, tc := range []struct {
		server, what, reply, kind string
	}{
		// A command a script runs, refused by the ACL.
		{"Redis 6.2", "ACL in script", "ERR Error running script (call to f_bc5a44dd87afe5eef12b192ef9c6d59411a56fc3): @user_script:1: @user_script: 1: The user executing the script can't run this command or subcommand", coordinator.KindPermission},
		{"Redis 7.0", "ACL in script", "ERR The user executing the script can't run this command or subcommand script: bc5a44dd87afe5eef12b192ef9c6d59411a56fc3, on @user_script:1.", coordinator.KindPermission},
		{"Redis 7.2", "ACL in script", "ERR ACL failure in script: User noinfo has no permissions to run the 'info' command script: bc5a44dd87afe5eef12b192ef9c6d59411a56fc3, on @user_script:1.", coordinator.KindPermission},
		{"Valkey 8.0", "ACL in script", "ERR ACL failure in script: User noinfo has no permissions to run the 'info' command script: bc5a44dd87afe5eef12b192ef9c6d59411a56fc3, on @user_script:1.", coordinator.KindPermission},
		{"Redis 6.2", "ACL channel in script", "ERR Error running script (call to f_840be5bbabc3783d2bd1f2f919c84b39733c8482): @user_script:1: @user_script: 1: The user executing the script can't publish to the channel mentioned in the command", coordinator.KindPermission},
		// The same command refused outside a script, and a key outside
		// the grant.
		{"Redis 6.2", "ACL", "NOPERM this user has no permissions to run the 'info' command or its subcommand", coordinator.KindPermission},
		{"Redis 7.0", "ACL", "NOPERM this user has no permissions to run the 'info' command", coordinator.KindPermission},
		{"Redis 7.2", "ACL", "NOPERM User noinfo has no permissions to run the 'info' command", coordinator.KindPermission},
		{"Redis 6.2", "ACL key", "NOPERM this user has no permissions to access one of the keys used as arguments", coordinator.KindPermission},
		{"Redis 7.2", "ACL key", "NOPERM No permissions to access a key", coordinator.KindPermission},
		// A write on a replica, from a script.
		{"Redis 6.2", "READONLY in script", "ERR Error running script (call to f_443733670b0ef78b16dd487685f55b152ecb1163): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.", coordinator.KindReadOnly},
		{"Redis 7.0", "READONLY in script", "READONLY You can't write against a read only replica. script: 443733670b0ef78b16dd487685f55b152ecb1163, on @user_script:1.", coordinator.KindReadOnly},
		{"Redis 7.2", "READONLY", "READONLY You can't write against a read only replica.", coordinator.KindReadOnly},
		// A server loading its data.
		{"Redis 6.2", "LOADING", "LOADING Redis is loading the dataset in memory", coordinator.KindLoading},
		{"Valkey 8.0", "LOADING", "LOADING Valkey is loading the dataset in memory", coordinator.KindLoading},
		// A script not loaded.
		{"Redis 6.2", "NOSCRIPT", "NOSCRIPT No matching script. Please use EVAL.", coordinator.KindScript},
		// A command the server lacks (SPUBLISH on Redis 6.2).
		{"Redis 6.2", "unknown command in script", "ERR Error running script (call to f_a7f7e2f3118c679baf4855c5a90514a8859b61fe): @user_script:1: @user_script: 1: Unknown Redis command called from Lua script", coordinator.KindScript},
		{"Valkey 8.0", "unknown command in script", "ERR Unknown command called from script script: 7ae0187b9ac91447963709e3bfd83c5935fec648, on @user_script:1.", coordinator.KindScript},
		{"Redis 7.0", "unknown command in script", "ERR Unknown Redis command called from script script: 7ae0187b9ac91447963709e3bfd83c5935fec648, on @user_script:1.", coordinator.KindScript},
		// A scope's data the scripts cannot read.
		{"Redis 6.2", "WRONGTYPE in script", "ERR Error running script (call to f_11a99c373546e335a8806632b9bf7a4eacdc2333): @user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value", kindCorrupt},
		{"Redis 7.0", "WRONGTYPE in script", "WRONGTYPE Operation against a key holding the wrong kind of value script: 11a99c373546e335a8806632b9bf7a4eacdc2333, on @user_script:1.", kindCorrupt},
		{"Redis 6.2", "Lua error", "ERR Error running script (call to f_104ac674cae76dbe6ea8ea984c435a4ba02c7d0b): @user_script:1: user_script:1: attempt to perform arithmetic on local 'x' (a nil value)", kindCorrupt},
		{"Redis 7.0", "Lua error", "ERR user_script:1: attempt to perform arithmetic on local 'x' (a nil value) script: 104ac674cae76dbe6ea8ea984c435a4ba02c7d0b, on @user_script:1.", kindCorrupt},
		// Out of memory: no kind, from a script or not.
		{"Redis 6.2", "OOM in script", "ERR Error running script (call to f_443733670b0ef78b16dd487685f55b152ecb1163): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.", ""},
		{"Redis 7.0", "OOM in script", "OOM command not allowed when used memory > 'maxmemory'. script: 443733670b0ef78b16dd487685f55b152ecb1163, on @user_script:1.", ""},
		// Credentials.
		{"Redis 7.0", "WRONGPASS", "WRONGPASS invalid username-password pair or user is disabled.", coordinator.KindAuth},
	} {
		t.Run(tc.server+"/"+tc.what, func(t *testing.T) {
			err := fmt.Errorf("redis coordinator: admit %q: %w", "s", replyError(tc.reply))
			if got := replyKind(err); got != tc.kind {
				t.Errorf("replyKind(%q) = %q, want %q", tc.reply, got, tc.kind)
			}
		})
	}
	if got := replyKind(errors.New("READONLY but not a reply")); got != "" {
		t.Errorf("replyKind of an error that is no reply = %q, want none", got)
	}
}

// TestTransient: what a later attempt may not meet, and what it will meet
// again (a refusal), on every server's words; a refusal that ended a
// Watch's feed is still a refusal.
func TestTransient(t *testing.T) {
	feedLost := func(err error) error {
		return fmt.Errorf("redis coordinator: watch: %w: %w", err, coordinator.ErrFeedLost)
	}
	for _, tc := range []struct {
		what string
		err  error
		want bool
	}{
		{"LOADING", replyError("LOADING Valkey is loading the dataset in memory"), true},
		{"READONLY", replyError("READONLY You can't write against a read only replica."), true},
		{"CLUSTERDOWN", replyError("CLUSTERDOWN Hash slot not served"), true},
		{"TRYAGAIN", replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"MASTERDOWN", replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{"BUSY", replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{"a broken connection", fmt.Errorf("redis coordinator: watch: %w", io.EOF), true},
		{"a silent feed", fmt.Errorf("redis coordinator: watch: no heartbeat heard for 1.5s: %w", coordinator.ErrFeedLost), true},
		{"WRONGPASS", replyError("WRONGPASS invalid username-password pair or user is disabled."), false},
		{"NOAUTH in a lost feed", feedLost(replyError("NOAUTH Authentication required.")), false},
		{"NOPERM in a lost feed", feedLost(replyError("NOPERM User svc has no permissions to access the 'cbgrpc:x' channel")), false},
		{"Redis 7.2's ACL in script", replyError("ERR ACL failure in script: User noinfo has no permissions to run the 'info' command script: bc5a44dd87afe5eef12b192ef9c6d59411a56fc3, on @user_script:1."), false},
		{"an unknown command", replyError("ERR unknown command 'ssubscribe', with args beginning with: "), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.what, tc.err, got, tc.want)
		}
	}
}
