package main

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// checkPubSub publishes and subscribes, plainly and sharded, on a channel
// under the prefix that no coordinator uses, as the transition feed
// does: the scripts publish (SPUBLISH on a Cluster) and the feeds
// subscribe. A server without the sharded commands (before Redis 7.0)
// does without them: the coordinator publishes with PUBLISH there.
func (d *doctor) checkPubSub(ctx context.Context) {
	const check = "pubsub"
	channel := d.e.prefix + "doctor"
	rdb := d.e.client
	var ok, refused, missing []string
	try := func(name string, err error) {
		switch {
		case err == nil:
			ok = append(ok, name)
		case strings.Contains(strings.ToLower(err.Error()), "unknown command"):
			missing = append(missing, name)
		default:
			refused = append(refused, name+" ("+err.Error()+")")
		}
	}
	try("PUBLISH", rdb.Publish(ctx, channel, "cbctl doctor").Err())
	try("SPUBLISH", rdb.SPublish(ctx, channel, "cbctl doctor").Err())
	try("SUBSCRIBE", subscribed(ctx, rdb.Subscribe(ctx, channel)))
	try("SSUBSCRIBE", subscribed(ctx, rdb.SSubscribe(ctx, channel)))
	found := strings.Join(ok, ", ") + " allowed on " + channel
	if len(missing) > 0 {
		found += "; " + strings.Join(missing, ", ") + " not on this server"
	}
	if len(refused) > 0 {
		d.add(check, "", statusFail, "refused: "+strings.Join(refused, "; "),
			"grant +publish +spublish +subscribe +ssubscribe +unsubscribe +sunsubscribe and &"+d.e.prefix+"* (docs/redis-acl.md)")
		return
	}
	d.add(check, "", statusOK, found, "")
}

// subscribed waits for the subscription's confirmation, or its refusal.
func subscribed(ctx context.Context, ps *goredis.PubSub) error {
	defer ps.Close()
	_, err := ps.Receive(ctx)
	return err
}
