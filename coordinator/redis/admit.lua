-- admit.lua: Admit. Runs after lib.lua; read.lua and write.lua go in at
-- the mark below (scripts.go): most admissions are of a closed scope, and
-- they answer before the helpers of reading and writing are made.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 probe slots, 9 probe lease ms, 10 claim
-- Reply: see reply in lib.lua, then the verdict (0 allow, 1 probe,
--   2 reject).
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
  return reply(s, false, nil, ALLOW)
end
-- read.lua, write.lua
s = begin(stored())
if s.state == CLOSED or s.state == DISABLED then
  -- Born just now, or a lapsed isolation ended.
  return reply(s, false, nil, ALLOW)
end
if s.state == ISOLATED then
  return reply(s, false, nil, REJECT)
end

local tr = false
if s.state == OPEN then
  if NOW < s.open_until then
    return reply(s, false, nil, REJECT)
  end
  -- No timer moves the breaker: the first admission after the open period
  -- does, and takes a probe slot in the same step.
  s.state, s.probe_successes = HALF_OPEN, 0
  redis.call('HSET', KEY_STATE, 'state', HALF_OPEN, 'probe_successes', 0)
  tr = transition(s, OPEN, 'open period ended')
end

local raw = redis.call('HGETALL', KEY_PROBES)
local live, earliest, mine = 0, false, false
local expired = {}
for i = 1, #raw, 2 do
  local deadline = tonumber(raw[i + 1])
  if deadline <= NOW then
    expired[#expired + 1] = raw[i]
  else
    live = live + 1
    if not earliest or deadline < earliest then
      earliest = deadline
    end
    if raw[i] == CLAIM then
      mine = true
    end
  end
end
hdel(KEY_PROBES, expired)

-- A retried admission keeps its slot, and its deadline: extending it would
-- let a retrying caller hold a slot forever.
if mine then
  return reply(s, tr, nil, PROBE)
end
if live < PROBES then
  redis.call('HSET', KEY_PROBES, CLAIM, int(NOW + PROBE_LEASE))
  return reply(s, tr, nil, PROBE)
end
return reply(s, tr, earliest - NOW, REJECT)
