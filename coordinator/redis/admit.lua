-- admit.lua: Admit, its arguments and its hot path. Runs after lib.lua;
-- read.lua, write.lua and then admit_write.lua follow it (scripts.go):
-- most admissions are of a closed scope, and they answer here, before the
-- helpers of reading and writing are made.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 probe slots, 9 probe lease ms, 10 claim
-- Reply: see reply in lib.lua, then verdict (0 allow, 1 probe, 2 reject).
local PROBES = tonumber(ARGV[8])
local PROBE_LEASE = tonumber(ARGV[9])
local CLAIM = ARGV[10]

local ALLOW, PROBE, REJECT = 0, 1, 2

-- The hot path: a scope that begin would leave as it is, closed or
-- disabled, admits without a write. It reads only the fields its answer
-- needs: the whole state costs a third of the script more.
local hot = redis.call('HMGET', KEY_STATE, 'state', 'generation', 'expires_at', 'recovered_at')
local s = {state = hot[1], generation = stored_int('state', 'generation', hot[2]),
  expires_at = stored_int('state', 'expires_at', hot[3]), recovered_at = stored_int('state', 'recovered_at', hot[4]) or 0}
if hot[1] and born(s) and s.generation >= SEEN and (s.state == CLOSED or s.state == DISABLED) then
  return reply(s, false, nil, 'verdict', ALLOW)
end
