-- policy.lua: SetOverride and ResetOverride of coordinator.Controller.
-- Runs on its own, after a line naming the publish command. The caller
-- reads the override, merges and checks the change (Go has the policy's
-- rules), and this script stores the result only if the stored version is
-- still the one the caller read, so that two operators' changes never
-- lose one another: on a conflict the caller reads again.
--
-- KEYS: 1 the policy hash of a scope (in its slot) or of the fleet
--   default: fields override (coordinator.Override.String, '' once
--   reset), version, by, reason, at (Unix ms); 2 the channel its changes
--   go out on (not a key): the scope's transitions, or the fleet's own
--   (docs/architecture.md, "Redis key layout")
-- ARGV: 1 now ms ('' = the server's TIME), 2 the version the caller read
--   ('0' = none), 3 the override to store ('' = none: a reset), 4 by,
--   5 reason
-- Reply: name/value pairs: outcome, then override, version, by, reason
--   and at, what is stored after the script; outcome 1 stored and
--   published, 0 nothing to change (a reset of no override), -1 the
--   version moved since the caller read.
local KEY, CHANNEL = KEYS[1], KEYS[2]
local NOW = tonumber(ARGV[1])
local READ = ARGV[2]
local OVERRIDE = ARGV[3]
local BY = ARGV[4]
local REASON = ARGV[5]

if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(n)
  return string.format('%d', n)
end

local v = redis.call('HMGET', KEY, 'override', 'version', 'by', 'reason', 'at')
local stored = {v[1] or '', v[2] or '0', v[3] or '', v[4] or '', v[5] or '0'}
local function answer(outcome, layer)
  return {'outcome', outcome, 'override', layer[1], 'version', layer[2], 'by', layer[3], 'reason', layer[4],
    'at', layer[5]}
end
if stored[2] ~= READ then
  return answer(-1, stored)
end
if OVERRIDE == '' and stored[1] == '' then
  return answer(0, stored)
end
-- implement.NextGeneration: versions only grow, across a reset too.
local version = int(math.max(tonumber(stored[2]) + 1, NOW * 1000))
redis.call('HSET', KEY, 'override', OVERRIDE, 'version', version, 'by', BY, 'reason', REASON, 'at', int(NOW))
-- "policy <version>": the Watch tells it from a transition by its first word.
redis.call(PUBLISH, CHANNEL, 'policy ' .. version)
return answer(1, {OVERRIDE, version, BY, REASON, int(NOW)})
