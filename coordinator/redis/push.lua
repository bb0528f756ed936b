-- push.lua: Push (server pushback). Runs after lib.lua.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 the generation of the pushed-back call
--   (decimal), 9 the open period ms (capped by the caller), 10 reason
--   If the rules opened the breaker from that generation and no push has
--   set its period yet, the push sets it (pushable_generation).
-- Reply: see reply in lib.lua, then stale: 1 if the push was stale,
--   else 0.
local GENERATION = ARGV[8]
local PERIOD = tonumber(ARGV[9])
local REASON = ARGV[10]

local s = begin(stored(STATE_FIELDS))
local from = s.state
if from == OPEN and GENERATION ~= '0' and redis.call('HGET', KEY_STATE, 'pushable_generation') == GENERATION then
  -- The outcome of a call of GENERATION landed first and opened it by the
  -- rules: the server's time wins, with no second transition.
  s.open_for, s.open_until = PERIOD, NOW + PERIOD
  save(s, false)
  redis.call('HDEL', KEY_STATE, 'pushable_generation')
  return reply(s, false, nil, 'stale', 0)
end
if int(s.generation) ~= GENERATION or (from ~= CLOSED and from ~= HALF_OPEN) then
  return reply(s, false, nil, 'stale', 1)
end
local calls, failures, slow = 0, 0, 0
if from == CLOSED and not s.newborn then
  local w = window(s)
  calls = w.current.calls + w.others.calls
  failures = w.current.failures + w.others.failures
  slow = w.current.slow + w.others.slow
end
open(s, PERIOD)
tripped(s, REASON, calls, failures, slow)
return reply(s, transition(s, from, REASON), nil, 'stale', 0)
