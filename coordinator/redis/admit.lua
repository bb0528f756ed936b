-- admit.lua: Admit. Runs after lib.lua.
--
-- KEYS: 1 state, 2 window, 3 leases, 4 batches, 5 channel (see lib.lua)
-- ARGV: 1 now ms or '', 2 bucket width ms, 3 buckets, 4 fresh generation,
--   5 scope, 6 GC margin ms, 7 probes, 8 probe lease ms, 9 claim
-- Reply: {verdict (0 allow, 1 probe, 2 reject), state, generation,
--   retry after ms, now, from, to, generation after, reason}; from = -1
--   when nothing moved.
local ALLOW, PROBE, REJECT = 0, 1, 2

local s = load(true)
if s.st == CLOSED then
  -- The hot path: no writes.
  return {ALLOW, CLOSED, s.g, 0, NOW, -1, -1, 0, ''}
end
if s.st == DISABLED then
  return {ALLOW, DISABLED, s.g, 0, NOW, -1, -1, 0, ''}
end
if s.st == ISOLATED then
  if not isolation_over(s) then
    local retry = 0
    if s.ou ~= 0 then
      retry = s.ou - NOW
    end
    return {REJECT, ISOLATED, s.g, retry, NOW, -1, -1, 0, ''}
  end
  -- Like an open period, an isolation for a set time ends lazily.
  close(s)
  publish({ISOLATED, CLOSED, s.g, ENDED})
  return {ALLOW, CLOSED, s.g, 0, NOW, ISOLATED, CLOSED, s.g, ENDED}
end

local tr = false
if s.st == OPEN then
  if NOW < s.ou then
    return {REJECT, OPEN, s.g, s.ou - NOW, NOW, -1, -1, 0, ''}
  end
  -- No timer moves the breaker: the first admission after the open period
  -- does, and takes a probe slot in the same step.
  s.st = HALF
  redis.call('HSET', KS, 'st', HALF, 'ps', 0)
  tr = {OPEN, HALF, s.g, 'open period ended'}
  publish(tr)
end

local function reply(verdict, retry)
  if tr then
    return {verdict, HALF, s.g, retry, NOW, tr[1], tr[2], tr[3], tr[4]}
  end
  return {verdict, HALF, s.g, retry, NOW, -1, -1, 0, ''}
end

local claim = ARGV[9]
local raw = redis.call('HGETALL', KP)
local n, earliest, mine = 0, false, false
local expired = {}
for i = 1, #raw, 2 do
  local deadline = tonumber(raw[i + 1])
  if deadline <= NOW then
    expired[#expired + 1] = raw[i]
  else
    n = n + 1
    if not earliest or deadline < earliest then
      earliest = deadline
    end
    if raw[i] == claim then
      mine = true
    end
  end
end
hdel(KP, expired)

-- A retried admission keeps its slot, and its deadline: extending it would
-- let a retrying caller hold a slot forever.
if mine then
  return reply(PROBE, 0)
end
if n < tonumber(ARGV[7]) then
  redis.call('HSET', KP, claim, int(NOW + tonumber(ARGV[8])))
  return reply(PROBE, 0)
end
return reply(REJECT, earliest - NOW)
