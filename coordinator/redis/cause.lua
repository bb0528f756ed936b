-- cause.lua: KeepCause of coordinator.CauseKeeper. Runs on its own, after
-- a line naming the publish command.
--
-- KEYS: 1 the scope's state hash, 2 its channel (not a key)
-- ARGV: 1 the transition's generation (decimal), 2 the state it moved to
--   (coordinator.State, decimal), 3 the cause (a traceparent, checked by
--   the caller)
-- Reply: 1 kept and published, 0 not: the scope has moved on, or has a
--   cause already, or never published a transition into this state.
--
-- The state hash keeps the last transition published (moved, written by
-- publish in lib.lua, which also drops the cause of the state left), so
-- that the feed can carry it again, as "caused <cause> <moved>".
local KEY_STATE, CHANNEL = KEYS[1], KEYS[2]
local GENERATION = ARGV[1]
local CODE = tonumber(ARGV[2])
local CAUSE = ARGV[3]
-- coordinator.State as the state hash spells it
local STATE = ({[0] = 'closed', 'open', 'half-open', 'isolated', 'disabled'})[CODE]

local v = redis.call('HMGET', KEY_STATE, 'state', 'generation', 'moved', 'cause')
local state, generation, moved, cause = v[1], v[2], v[3], v[4]
if state ~= STATE or generation ~= GENERATION or not moved or cause then
  return 0
end
-- moved reads "from to generation ...": it must be the move into this
-- state of this generation, not one the state has outlived.
local to, moved_generation = string.match(moved, '^%d+ (%d+) (%d+) ')
if moved_generation ~= GENERATION or tonumber(to) ~= CODE then
  return 0
end
redis.call('HSET', KEY_STATE, 'cause', CAUSE)
redis.call(PUBLISH, CHANNEL, 'caused ' .. CAUSE .. ' ' .. moved)
return 1
