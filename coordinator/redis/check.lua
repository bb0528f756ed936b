-- check.lua: Check. Runs as every operation's script runs (EVALSHA, and
-- EVAL on NOSCRIPT), on a key under the prefix, and leaves nothing
-- behind, so that what the ACL or the server refuses shows here rather
-- than on the first call. It tries every command the operations' scripts
-- run: on Redis 7 and Valkey by asking the ACL (redis.acl_check_cmd)
-- without running them; on Redis 6, which cannot ask, by running each
-- where it changes nothing, on a key of its own that it deletes again.
--
-- KEYS: 1 the fleet default's policy hash (read only), 2 the check's own
--   key, in the same slot (Redis 6 writes and deletes it)
-- ARGV: 1 a channel under the prefix that nobody follows, 2 the publish
--   command (PUBLISH or SPUBLISH)
-- Reply: the commands the user may not run, {} when none
local KEY = KEYS[1]
local SCRATCH = KEYS[2]
local CHANNEL = ARGV[1]
local PUBLISH = ARGV[2]
local NUMSUB = PUBLISH == 'SPUBLISH' and 'SHARDNUMSUB' or 'NUMSUB'

redis.call('TIME')
redis.call('HGET', KEY, 'version')

local refused = {}

-- named is how a refusal names a command: with its subcommand, if any.
local function named(cmd, arg)
  if cmd == 'PUBSUB' then
    return cmd .. ' ' .. arg
  end
  return cmd
end

if redis.acl_check_cmd then
  local checks = {
    {'HGETALL', KEY}, {'HMGET', KEY, 'f'}, {'HVALS', KEY}, {'HSET', KEY, 'f', 'v'},
    {'HDEL', KEY, 'f'}, {'DEL', KEY}, {'PERSIST', KEY}, {'PEXPIRE', KEY, '1'},
    {PUBLISH, CHANNEL, 'm'}, {'PUBSUB', NUMSUB, CHANNEL},
  }
  for _, c in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(c)) then
      refused[#refused + 1] = named(unpack(c))
    end
  end
  return refused
end

-- tried runs a command and reports whether the ACL let it run: an error
-- of another kind is no refusal, and shows on the operations' first call.
local function tried(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err and string.find(r.err, "The user executing the script can't", 1, true) then
    refused[#refused + 1] = named(...)
    return false
  end
  return true
end
tried('HGETALL', KEY)
tried('HMGET', KEY, 'f')
tried('HVALS', KEY)
tried('HDEL', SCRATCH, 'f')
tried('PERSIST', SCRATCH)
tried('PEXPIRE', SCRATCH, '1')
-- HSET is tried only when DEL can take its key away again.
if tried('DEL', SCRATCH) then
  tried('HSET', SCRATCH, 'f', 'v')
  redis.call('DEL', SCRATCH)
end
tried(PUBLISH, CHANNEL, '')
tried('PUBSUB', NUMSUB, CHANNEL)
return refused
