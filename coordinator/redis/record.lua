-- record.lua: Record. Runs after lib.lua.
--
-- KEYS: 1 state, 2 window, 3 leases, 4 batches, 5 channel (see lib.lua)
-- ARGV: 1 now ms or '', 2 bucket width ms, 3 buckets, 4 fresh generation,
--   5 scope, 6 GC margin ms, 7 min calls, 8 failure permille (0 = off),
--   9 slow permille (0 = off), 10 consecutive failures (0 = off),
--   11 open for ms, 12 batch ID ('' = none), 13 how many batch IDs to
--   remember, then per outcome two values: its generation (decimal) and
--   flags (1 = failure, 2 = slow, 3 = both)
-- Reply: see result in lib.lua.
local FIRST = 14
local n = (#ARGV - FIRST + 1) / 2

local s = load(true)
local batch = ARGV[12]
-- Disabled counts outcomes, for people to see, and never trips.
if s.st ~= CLOSED and s.st ~= DISABLED then
  return result(s, n, false)
end
-- A fresh scope remembers no batch.
if batch ~= '' and not s.fresh and redis.call('LPOS', KB, batch) then
  return result(s, n, false)
end

local min_calls = tonumber(ARGV[7])
local fail_pm, slow_pm = tonumber(ARGV[8]), tonumber(ARGV[9])
local consecutive = tonumber(ARGV[10])

local function percent(pm)
  if pm % 10 == 0 then
    return string.format('%d%%', pm / 10)
  end
  return string.format('%d.%d%%', math.floor(pm / 10), pm % 10)
end

-- Sum the other live buckets once; the batch only adds to the current one,
-- so the rules cost O(1) per outcome after this O(buckets) read.
local gs = int(s.g)
local base_c, base_f, base_s = 0, 0, 0
local cur_c, cur_f, cur_s = 0, 0, 0
local dead = {}
local wipe = false
if not s.fresh then
  local label, fields = window()
  if label == gs then
    for _, f in ipairs(fields) do
      local c, fl, sl = parse_bucket(f[2])
      if f[1] == IDX then
        cur_c, cur_f, cur_s = c, fl, sl
      elseif live(f[1]) then
        base_c, base_f, base_s = base_c + c, base_f + fl, base_s + sl
      elseif f[1] <= IDX - NB then
        dead[#dead + 1] = f[3]
      end
    end
  else
    -- Buckets of another generation count for nothing.
    wipe = true
  end
end

local function trip_reason()
  if s.st == DISABLED then
    return false
  end
  if consecutive > 0 and s.cf >= consecutive then
    return string.format('consecutive failures %d >= %d', s.cf, consecutive)
  end
  local calls = base_c + cur_c
  if calls < min_calls then
    return false
  end
  local failures, slow = base_f + cur_f, base_s + cur_s
  -- integer math: 0.5 must trip at exactly 2 of 4
  if fail_pm > 0 and failures * 1000 >= fail_pm * calls then
    return string.format('failures %d/%d >= %s', failures, calls, percent(fail_pm))
  end
  if slow_pm > 0 and slow * 1000 >= slow_pm * calls then
    return string.format('slow calls %d/%d >= %s', slow, calls, percent(slow_pm))
  end
  return false
end

local stale, counted = 0, 0
local tr = false
for i = FIRST, #ARGV, 2 do
  if tr or ARGV[i] ~= gs then
    stale = stale + 1
  else
    counted = counted + 1
    local flags = tonumber(ARGV[i + 1])
    cur_c = cur_c + 1
    if flags % 2 == 1 then
      cur_f = cur_f + 1
      s.cf = s.cf + 1
    else
      s.cf = 0
    end
    if flags >= 2 then
      cur_s = cur_s + 1
    end
    local reason = trip_reason()
    if reason then
      open(s, tonumber(ARGV[11]))
      tr = {CLOSED, OPEN, s.g, reason}
    end
  end
end

if counted == 0 then
  return result(s, stale, false)
end
if not tr then
  s.exp = (IDX + NB) * WIDTH
  save(s, wipe)
  redis.call('HSET', KW, int(IDX), string.format('%d %d %d', cur_c, cur_f, cur_s))
  hdel(KW, dead)
end
if batch ~= '' then
  redis.call('RPUSH', KB, batch)
  redis.call('LTRIM', KB, -tonumber(ARGV[13]), -1)
  if tr or s.st ~= CLOSED then
    redis.call('PERSIST', KB)
  else
    redis.call('PEXPIRE', KB, ttl(s))
  end
end
return result(s, stale, tr)
