-- census.lua: what a Watch believes of its shared heartbeat channel
-- (sharedheartbeat.go) instead of what it hears there, since anyone who
-- may publish on the channel can say anything: how many follow the channel
-- on the node the commands go to, and that node's replication ID, as
-- heartbeat.lua's reply says them, from Redis itself and publishing
-- nothing. Runs on its own, after a line naming the publish command.
--
-- KEYS: 1 the shared channel (not a key: it routes the script to the node
--   of its slot, heartbeatBase)
-- Reply: name/value pairs: followers, the channel's subscribers on the
--   node; replid, the node's master_replid
local CHANNEL = KEYS[1]
local NUMSUB = PUBLISH == 'SPUBLISH' and 'SHARDNUMSUB' or 'NUMSUB'

local info = redis.call('INFO', 'replication')
local replid = string.match(info, 'master_replid:(%x+)') or '-'
return {'followers', redis.call('PUBSUB', NUMSUB, CHANNEL)[2], 'replid', replid}
