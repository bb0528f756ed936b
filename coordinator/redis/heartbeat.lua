-- heartbeat.lua: a shared heartbeat (heartbeat.go). Runs on its own, after
-- a line naming the publish command. It says whose replication stream it
-- is part of: the master_replid of the node it runs on, which a replica
-- takes from its master and a promoted replica makes anew. So a Watch
-- whose subscription has come to carry another master's stream (a demoted
-- master that resynchronised from the new one, losing what was published
-- in between) hears it in the next heartbeat, and one that publishes to
-- another master than it hears learns it from the reply.
--
-- KEYS: 1 the shared channel (not a key: it routes the script to the node
--   of its slot, heartbeatBase)
-- ARGV: 1 the Watch's id, 2 how many followers its previous heartbeat
--   on the channel reached ('' = not known)
-- Reply: name/value pairs: followers, how many it reached; replid, the
--   node's master_replid
local CHANNEL = KEYS[1]
local ID = ARGV[1]
local FOLLOWERS = ARGV[2]

local info = redis.call('INFO', 'replication')
local replid = string.match(info, 'master_replid:(%x+)') or '-'
local message = ID .. ' ' .. replid
if FOLLOWERS ~= '' then
  message = message .. ' ' .. FOLLOWERS
end
return {'followers', redis.call(PUBLISH, CHANNEL, message), 'replid', replid}
