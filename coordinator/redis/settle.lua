-- settle.lua: Settle. Runs after lib.lua.
--
-- KEYS: 1 state, 2 window, 3 leases, 4 batches, 5 channel (see lib.lua)
-- ARGV: 1 now ms or '', 2 bucket width ms, 3 buckets, 4 fresh generation,
--   5 scope, 6 GC margin ms, 7 claim, 8 the probe's generation (decimal),
--   9 1 if the probe failed (an error or too slow) else 0, 10 open for ms,
--   11 max open for ms (0 = no back-off), 12 probe successes needed
-- Reply: see result in lib.lua.

local s = load(true)
-- Physical state: an open breaker whose period ended has no leases yet,
-- so nothing can be settled in it.
if s.st ~= HALF or int(s.g) ~= ARGV[8] then
  return result(s, 1, false)
end
local claim = ARGV[7]
local deadline = redis.call('HGET', KP, claim)
if not deadline or tonumber(deadline) <= NOW then
  return result(s, 1, false)
end
redis.call('HDEL', KP, claim)

if ARGV[9] == '1' then
  local period = tonumber(ARGV[10])
  local max_open = tonumber(ARGV[11])
  if max_open > 0 then
    period = math.min(math.max(s.of, period) * 2, max_open)
  end
  open(s, period)
  return result(s, 0, {HALF, OPEN, s.g, 'probe failed'})
end

s.ps = s.ps + 1
local need = tonumber(ARGV[12])
if s.ps < need then
  redis.call('HSET', KS, 'ps', s.ps)
  return result(s, 0, false)
end
local n = s.ps
close(s)
return result(s, 0, {HALF, CLOSED, s.g, string.format('probes succeeded %d/%d', n, need)})
