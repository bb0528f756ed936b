package main

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// grantCommand is one command of the grant docs/redis-acl.md documents,
// as ACL DRYRUN runs it: on a key and a channel under the prefix, so
// that the grant's patterns are checked with it.
type grantCommand struct {
	rule string // the grant's word: "+hset"
	args []any  // the command, as DRYRUN takes it
}

// grant is the grant of docs/redis-acl.md, word for word as rules, with
// the Cluster's additions when cluster.
func grant(prefix string, cluster bool) []grantCommand {
	key := prefix + "doctor"
	cmds := []grantCommand{
		{"+evalsha", []any{"EVALSHA", strings.Repeat("0", 40), "1", key}},
		{"+eval", []any{"EVAL", "return 1", "1", key}},
		{"+time", []any{"TIME"}},
		{"+hget", []any{"HGET", key, "f"}},
		{"+hgetall", []any{"HGETALL", key}},
		{"+hmget", []any{"HMGET", key, "f"}},
		{"+hset", []any{"HSET", key, "f", "v"}},
		{"+hdel", []any{"HDEL", key, "f"}},
		{"+hvals", []any{"HVALS", key}},
		{"+del", []any{"DEL", key}},
		{"+persist", []any{"PERSIST", key}},
		{"+pexpire", []any{"PEXPIRE", key, "1"}},
		{"+publish", []any{"PUBLISH", key, "m"}},
		{"+spublish", []any{"SPUBLISH", key, "m"}},
		{"+subscribe", []any{"SUBSCRIBE", key}},
		{"+ssubscribe", []any{"SSUBSCRIBE", key}},
		{"+unsubscribe", []any{"UNSUBSCRIBE", key}},
		{"+sunsubscribe", []any{"SUNSUBSCRIBE", key}},
		{"+ping", []any{"PING"}},
		{"+info", []any{"INFO", "replication"}},
		{"+wait", []any{"WAIT", "0", "0"}},
	}
	if cluster {
		cmds = append(cmds, grantCommand{"+cluster|slots", []any{"CLUSTER", "SLOTS"}}, grantCommand{"+command", []any{"COMMAND"}})
	}
	return cmds
}

// checkACL asks the server with ACL DRYRUN (Redis 7.0) whether the user
// (--user, else the one cbctl connects as) holds every command of the
// grant on the prefix's keys and channels. Where DRYRUN is missing or
// refused, the user's grant was checked by use instead, by the checks
// that ran the commands themselves.
func (d *doctor) checkACL(ctx context.Context, n *goredis.Client, v serverVersion) {
	const check = "acl"
	if v.known() && !v.atLeast(6, 0) {
		d.add(check, d.node(n), statusSkip, "no ACL before Redis 6.0", "")
		return
	}
	user, named := d.opts.user, d.opts.user != ""
	if !named {
		var err error
		if user, err = n.Do(ctx, "ACL", "WHOAMI").Text(); err != nil {
			d.add(check, d.node(n), statusSkip, "ACL WHOAMI refused to this user: its grant was checked by use (scripts, pubsub, replicas)",
				"to check the grant itself, run doctor as an administrator with --user NAME")
			return
		}
	}
	_, cluster := d.e.client.(*goredis.ClusterClient)
	var denied []string
	for _, g := range grant(d.e.prefix, cluster) {
		answer, err := n.Do(ctx, append([]any{"ACL", "DRYRUN", user}, g.args...)...).Text()
		if err != nil {
			d.dryRunFailed(n, user, named, err)
			return
		}
		if answer != "OK" {
			denied = append(denied, fmt.Sprintf("%s (%s)", g.rule, answer))
		}
	}
	if len(denied) > 0 {
		d.add(check, d.node(n), statusFail, fmt.Sprintf("user %q lacks part of the grant of docs/redis-acl.md: %s", user, strings.Join(denied, "; ")),
			fmt.Sprintf("ACL SETUSER %s with the grant of docs/redis-acl.md, prefix %q", user, d.e.prefix))
		return
	}
	d.add(check, d.node(n), statusOK, fmt.Sprintf("user %q holds the grant of docs/redis-acl.md on %s* (ACL DRYRUN)", user, d.e.prefix), "")
}

// dryRunFailed reports an ACL DRYRUN that could not run: missing before
// Redis 7.0, or refused to a user without the ACL command.
func (d *doctor) dryRunFailed(n *goredis.Client, user string, named bool, err error) {
	const check = "acl"
	switch {
	case named && strings.Contains(err.Error(), "not found"):
		d.add(check, d.node(n), statusFail, fmt.Sprintf("no user %q on this server: %v", user, err),
			fmt.Sprintf("create it: ACL SETUSER %s on >PASSWORD with the grant of docs/redis-acl.md", user))
		return
	case named:
		d.add(check, d.node(n), statusWarn, fmt.Sprintf("could not check user %q: ACL DRYRUN: %v", user, err),
			"run doctor on Redis 7.0 or later as a user that may run ACL, or as the user itself (checked by use)")
		return
	}
	d.add(check, d.node(n), statusSkip, fmt.Sprintf("ACL DRYRUN not available (%v): the grant of user %q was checked by use (scripts, pubsub, replicas)", err, user), "")
}
