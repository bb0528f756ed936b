-- check.lua: Check. Runs as every operation's script runs (EVALSHA, and
-- EVAL on NOSCRIPT), on a key under the prefix, and writes nothing, so
-- that what the ACL or the server refuses shows here rather than on the
-- first call. On Redis 7 it also asks the ACL about every command the
-- operations' scripts run, without running them.
--
-- KEYS: 1 the fleet default's policy hash (read only)
-- ARGV: 1 the fleet default's channel, 2 the publish command (PUBLISH or
--   SPUBLISH)
-- Reply: the commands the user may not run, {} when none
local KEY = KEYS[1]
local CHANNEL = ARGV[1]
local PUBLISH = ARGV[2]

redis.call('TIME')
redis.call('HGET', KEY, 'version')

local refused = {}
if redis.acl_check_cmd then
  local checks = {
    {'HGETALL', KEY}, {'HMGET', KEY, 'f'}, {'HVALS', KEY}, {'HSET', KEY, 'f', 'v'},
    {'HDEL', KEY, 'f'}, {'DEL', KEY}, {'PERSIST', KEY}, {'PEXPIRE', KEY, '1'},
    {PUBLISH, CHANNEL, 'm'},
  }
  for _, c in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(c)) then
      refused[#refused + 1] = c[1]
    end
  end
end
return refused
