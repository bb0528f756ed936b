-- check.lua: Check. Runs as every operation's script runs (EVALSHA, and
-- EVAL on NOSCRIPT), on a key under the prefix, with the commands every
-- script starts with, and writes nothing, so that what the ACL or the
-- server refuses shows here rather than on the first call.
--
-- KEYS: 1 the fleet default's policy hash (read only)
-- ARGV: none
-- Reply: 1
local KEY = KEYS[1]

redis.call('TIME')
redis.call('HGET', KEY, 'version')
return 1
