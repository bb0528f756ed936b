package main

import (
	"context"
	"errors"
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
		{"+pubsub|numsub", []any{"PUBSUB", "NUMSUB", key}},
		{"+pubsub|shardnumsub", []any{"PUBSUB", "SHARDNUMSUB", key}},
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
// grant on the prefix's keys and channels; a server without DRYRUN
// (Redis 6) is asked with ACL GETUSER, whose rules doctor reads itself.
// Where neither may be asked, the user's grant was checked by use
// instead, by the checks that ran the commands themselves.
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
	g := grant(d.e.prefix, cluster)
	how, note := "ACL DRYRUN", ""
	denied, err := dryRun(ctx, n, user, g)
	if err != nil && strings.HasPrefix(err.Error(), "ERR Unknown subcommand") {
		how, note = "ACL GETUSER", "; +spublish +ssubscribe +sunsubscribe +pubsub|shardnumsub left out, which Redis 6 lacks"
		denied, err = d.getUserDenied(ctx, n, user, g)
	}
	var more []string
	if err == nil && len(denied) == 0 {
		if how == "ACL DRYRUN" {
			more, err = dryRunAllowed(ctx, n, user, beyond(d.e.prefix))
		} else {
			more, err = d.getUserAllowed(ctx, n, user, beyond(d.e.prefix))
		}
	}
	switch {
	case err != nil:
		d.aclFailed(n, user, named, how, err)
	case len(denied) > 0:
		d.add(check, d.node(n), statusFail, fmt.Sprintf("user %q lacks part of the grant of docs/redis-acl.md: %s", user, strings.Join(denied, "; ")),
			fmt.Sprintf("ACL SETUSER %s with the grant of docs/redis-acl.md, prefix %q", user, d.e.prefix))
	case len(more) > 0 && user == "default":
		// A server with no ACL of its own: development, most often.
		d.add(check, d.node(n), statusOK, fmt.Sprintf("user %q holds the grant of docs/redis-acl.md on %s* (%s%s), and every command besides: "+
			"in production, give the coordinator a user of its own with only the grant", user, d.e.prefix, how, note), "")
	case len(more) > 0:
		d.add(check, d.node(n), statusWarn, fmt.Sprintf("user %q holds more than the grant of docs/redis-acl.md: %s; every replica holds its password, "+
			"so any of them may do as much", user, strings.Join(more, ", ")),
			fmt.Sprintf("ACL SETUSER %s reset, then the grant of docs/redis-acl.md, prefix %q", user, d.e.prefix))
	default:
		d.add(check, d.node(n), statusOK, fmt.Sprintf("user %q holds the grant of docs/redis-acl.md on %s* (%s%s)", user, d.e.prefix, how, note), "")
	}
}

// beyond is what of a user's rights outside the grant on prefix doctor
// warns of: keys and channels outside the prefix, and the commands a
// replica's password should not carry. Rules name them for ACL GETUSER
// (a rule of "~" or "&": any pattern not under the prefix), commands for
// ACL DRYRUN (which finds a pattern that takes a name outside the prefix,
// "*" or "d*", not every one: "other:*").
func beyond(prefix string) []grantCommand {
	outside := "doctor-outside"
	if strings.HasPrefix(outside, prefix) {
		outside = "x" + outside
	}
	return []grantCommand{
		{"~keys outside " + prefix + "*", []any{"HGET", outside, "f"}},
		{"&channels outside " + prefix + "*", []any{"PUBLISH", outside, "m"}},
		{"+set", []any{"SET", prefix + "doctor", "v"}},
		{"+keys", []any{"KEYS", "*"}},
		{"+flushall", []any{"FLUSHALL"}},
		{"+config|set", []any{"CONFIG", "SET", "maxmemory", "0"}},
		{"+script|flush", []any{"SCRIPT", "FLUSH"}},
		{"+acl|setuser", []any{"ACL", "SETUSER", "doctor"}},
		{"+shutdown", []any{"SHUTDOWN"}},
	}
}

// dryRunAllowed returns what of g ACL DRYRUN lets user do, named by
// beyondName.
func dryRunAllowed(ctx context.Context, n *goredis.Client, user string, g []grantCommand) ([]string, error) {
	var allowed []string
	err := dryRunEach(ctx, n, user, g, func(c grantCommand, answer string) {
		if answer == "OK" {
			allowed = append(allowed, beyondName(c.rule))
		}
	})
	return allowed, err
}

// beyondName names one of beyond's rules to a person: "keys outside
// cbgrpc:*", "CONFIG SET".
func beyondName(rule string) string {
	if rule[0] == '+' {
		return strings.ToUpper(strings.ReplaceAll(rule[1:], "|", " "))
	}
	return rule[1:]
}

// getUserAllowed is dryRunAllowed read from user's rules (ACL GETUSER).
func (d *doctor) getUserAllowed(ctx context.Context, n *goredis.Client, user string, g []grantCommand) ([]string, error) {
	u, err := getUser(ctx, n, user)
	if err != nil {
		return nil, err
	}
	return u.allowed(ctx, n, g, d.e.prefix)
}

// errNoUser is a user the server does not have.
var errNoUser = errors.New("not found")

// dryRun returns the rules of g that ACL DRYRUN refuses to user, each
// with the refusal.
func dryRun(ctx context.Context, n *goredis.Client, user string, g []grantCommand) ([]string, error) {
	var denied []string
	err := dryRunEach(ctx, n, user, g, func(c grantCommand, answer string) {
		if answer != "OK" {
			denied = append(denied, fmt.Sprintf("%s (%s)", c.rule, answer))
		}
	})
	return denied, err
}

// dryRunEach asks ACL DRYRUN whether user may run each command of g, and
// hands each answer ("OK", or the refusal) to take.
func dryRunEach(ctx context.Context, n *goredis.Client, user string, g []grantCommand, take func(grantCommand, string)) error {
	for _, c := range g {
		answer, err := n.Do(ctx, append([]any{"ACL", "DRYRUN", user}, c.args...)...).Text()
		if err != nil {
			return err
		}
		take(c, answer)
	}
	return nil
}

// getUserDenied returns the rules of g that user's rules, as ACL GETUSER
// gives them, leave out.
func (d *doctor) getUserDenied(ctx context.Context, n *goredis.Client, user string, g []grantCommand) ([]string, error) {
	u, err := getUser(ctx, n, user)
	if err != nil {
		return nil, err
	}
	return u.denied(ctx, n, g, d.e.prefix)
}

// aclFailed reports an ACL check that could not run: refused to a user
// without the ACL command, or asked of a user the server lacks.
func (d *doctor) aclFailed(n *goredis.Client, user string, named bool, how string, err error) {
	const check = "acl"
	switch {
	case named && (errors.Is(err, errNoUser) || strings.Contains(err.Error(), "not found")):
		d.add(check, d.node(n), statusFail, fmt.Sprintf("no user %q on this server: %v", user, err),
			fmt.Sprintf("create it: ACL SETUSER %s on >PASSWORD with the grant of docs/redis-acl.md", user))
		return
	case named:
		d.add(check, d.node(n), statusWarn, fmt.Sprintf("could not check user %q: %s: %v", user, how, err),
			"run doctor as a user that may run ACL, or as the user itself (checked by use)")
		return
	}
	d.add(check, d.node(n), statusSkip, fmt.Sprintf("%s not available (%v): the grant of user %q was checked by use (scripts, pubsub, replicas)", how, err, user), "")
}
