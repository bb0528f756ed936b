-- settle.lua: Settle. Runs after lib.lua.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 claim, 9 the probe's generation (decimal),
--   10 1 if the probe failed (an error or too slow) else 0, 11 open for ms,
--   12 max open for ms (0 = no back-off), 13 probe successes needed,
--   14 back off after ms (Policy.BackoffAfter)
-- Reply: see reply in lib.lua, then stale: the number of stale
--   settlements.
local CLAIM = ARGV[8]
local PROBE_GENERATION = ARGV[9]
local FAILED = ARGV[10] == '1'
local OPEN_FOR = tonumber(ARGV[11])
local MAX_OPEN_FOR = tonumber(ARGV[12])
local PROBE_SUCCESSES = tonumber(ARGV[13])
local BACKOFF_AFTER = tonumber(ARGV[14])

local s = begin(stored(STATE_FIELDS))
-- Physical state: an open breaker whose period ended has no leases yet,
-- so nothing can be settled in it.
if s.state ~= HALF_OPEN or int(s.generation) ~= PROBE_GENERATION then
  return reply(s, false, nil, 'stale', 1)
end
local deadline = redis.call('HGET', KEY_PROBES, CLAIM)
if not deadline or tonumber(deadline) <= NOW then
  return reply(s, false, nil, 'stale', 1)
end
redis.call('HDEL', KEY_PROBES, CLAIM)

if FAILED then
  open(s, reopen_for(OPEN_FOR, MAX_OPEN_FOR, BACKOFF_AFTER, s.open_for, s.failing_since), s.generation)
  tripped(s, 'probe failed', 0, 0, 0)
  return reply(s, transition(s, HALF_OPEN, 'probe failed'), nil, 'stale', 0)
end

s.probe_successes = s.probe_successes + 1
if s.probe_successes < PROBE_SUCCESSES then
  redis.call('HSET', KEY_STATE, 'probe_successes', s.probe_successes)
  return reply(s, false, nil, 'stale', 0)
end
local succeeded = s.probe_successes
close(s)
return reply(s, transition(s, HALF_OPEN, string.format('probes succeeded %d/%d', succeeded, PROBE_SUCCESSES)), nil, 'stale', 0)
