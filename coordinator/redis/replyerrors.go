package redis

import (
	"errors"
	"regexp"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// kindCorrupt is the class of a reply that refuses one scope's data (a
// key of the wrong type, or a script failing on what it read), which
// concerns that scope alone; the other classes concern every scope.
const kindCorrupt = "corrupt"

// A replyRule is a row of replyErrors.
type replyRule struct {
	text     string
	anywhere bool
	kind     string
	// transient: the server says it cannot serve now (loading, failing
	// over, resharding, busy), which a later attempt may not meet.
	transient bool
}

// replyErrors is the one table of the error replies the coordinator tells
// apart, as Redis 6.2 to 7.4 and Valkey word them (replyerrors_test.go
// holds each server's words). A row matches the reply's text once
// unwrapped (unwrapReply) when it starts with prefix or, for a row with
// anywhere, contains it; the first row that matches decides.
var replyErrors = []replyRule{
	{text: "READONLY", kind: coordinator.KindReadOnly, transient: true},
	{text: "LOADING", kind: coordinator.KindLoading, transient: true},
	// A Cluster whose slot has no master or is moving, a replica cut off
	// from its master.
	{text: "CLUSTERDOWN", transient: true},
	{text: "TRYAGAIN", transient: true},
	{text: "MASTERDOWN", transient: true},
	{text: "WRONGPASS", kind: coordinator.KindAuth},
	{text: "NOAUTH", kind: coordinator.KindAuth},
	// How Redis 7 cuts off a client that sent a long command before
	// authenticating.
	{text: "unauthenticated", anywhere: true, kind: coordinator.KindAuth},
	{text: "NOPERM", kind: coordinator.KindPermission},
	// A command a script runs, or its key or channel, refused by the
	// ACL: Redis 6.2 and 7.0 ...
	{text: "The user executing the script can't", anywhere: true, kind: coordinator.KindPermission},
	// ... and Redis 7.2 and later, Valkey.
	{text: "ACL failure in script", kind: coordinator.KindPermission},
	{text: "WRONGTYPE", kind: kindCorrupt},
	// A Lua error raised by a script of ours: it found what it cannot
	// read.
	{text: "user_script:", kind: kindCorrupt},
	// Out of memory has no kind, though Redis 7 names the script it
	// came from.
	{text: "OOM", kind: ""},
	{text: "NOSCRIPT", kind: coordinator.KindScript},
	// Busy with another script, which may end.
	{text: "BUSY ", kind: coordinator.KindScript, transient: true},
	// The server lacks a command a script runs, is busy with another
	// script, or failed one some other way.
	{text: "script", anywhere: true, kind: coordinator.KindScript},
}

// replyKind is the class of err when it is an error reply of the server:
// a coordinator.Kind* or kindCorrupt; "" for a reply of no class the
// table names, or for an error that is no reply.
func replyKind(err error) string {
	row, _ := replyRow(err)
	return row.kind
}

// replyRow is the row of replyErrors that err, an error reply of the
// server, matches; reply is false for an error that is no reply.
func replyRow(err error) (row replyRule, reply bool) {
	var r goredis.Error
	if !errors.As(err, &r) {
		return replyRule{}, false
	}
	msg := unwrapReply(r.Error())
	for _, row := range replyErrors {
		if strings.HasPrefix(msg, row.text) || row.anywhere && strings.Contains(msg, row.text) {
			return row, true
		}
	}
	return replyRule{}, true
}

// Transient reports whether err, from the coordinator, is one that a
// later attempt may not meet: the connection broke, was refused or timed
// out, a Watch's feed was lost, or the server's reply says it cannot serve
// now (loading, a replica, a Cluster failing over or resharding, busy with
// a script). A refusal (credentials, the ACL) or any other reply is not.
func Transient(err error) bool {
	switch kindOf(err) {
	case coordinator.KindAuth, coordinator.KindPermission:
		return false
	}
	row, reply := replyRow(err)
	return !reply || row.transient
}

// redis6Script is how Redis 6 wraps an error a script raised: the error
// of a command it ran follows "@user_script: <line>: " with the command's
// own "-".
var redis6Script = regexp.MustCompile(`^ERR Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: (?:@user_script: \d+: -?)?`)

// unwrapReply is the text of an error reply as the command that failed
// gave it, without the wrapper of the script that ran the command (Redis
// 6) and without a leading "ERR ", so that one table row matches every
// server's words.
func unwrapReply(msg string) string {
	if loc := redis6Script.FindStringIndex(msg); loc != nil {
		msg = msg[loc[1]:]
	}
	return strings.TrimPrefix(msg, "ERR ")
}

// corrupt reports whether err is the server refusing this scope's data
// rather than the server or the network failing.
func corrupt(err error) bool { return replyKind(err) == kindCorrupt }
