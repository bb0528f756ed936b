-- admit_write.lua: Admit of a scope that the hot path in admit.lua did
-- not answer: one to be born, isolated, open or half-open. Runs after
-- admit.lua, read.lua and write.lua (scripts.go).
s = begin(stored(STATE_FIELDS))
if s.state == CLOSED or s.state == DISABLED then
  -- Born just now, or a lapsed isolation ended.
  return reply(s, false, nil, 'verdict', ALLOW)
end
if s.state == ISOLATED then
  return reply(s, false, nil, 'verdict', REJECT)
end

local tr = false
if s.state == OPEN then
  if NOW < s.open_until then
    return reply(s, false, nil, 'verdict', REJECT)
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
  return reply(s, tr, nil, 'verdict', PROBE)
end
if live < PROBES then
  redis.call('HSET', KEY_PROBES, CLAIM, int(NOW + PROBE_LEASE))
  return reply(s, tr, nil, 'verdict', PROBE)
end
return reply(s, tr, earliest - NOW, 'verdict', REJECT)
