-- record.lua: Record. Runs after lib.lua.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 min calls, 9 failure permille (0 = off),
--   10 slow permille (0 = off), 11 consecutive failures (0 = off),
--   12 open for ms, 13 batch ID ('' = none), 14 how many batch IDs to
--   remember, 15 the fingerprint of the Record's policy
--   (Policy.Fingerprint), 16 its source (coordinator.PolicySource, decimal),
--   17 its encoding (Policy.Encode), 18 how many policies to remember
--   (coordinator.RecentPolicies), then from 19 on three values per run of
--   equal outcomes, in order: their generation (decimal), flags (1 =
--   failure, 2 = slow, 3 = both, 4 = throttled: a request the caller
--   rejected itself, no call) and how many
-- Reply: see reply in lib.lua, then the number of stale outcomes; after a
--   Record that counted outcomes and did not trip, then the window's
--   calls, failures, slow calls and throttled requests.
--
-- Every Record carries its policy (Snapshot.Policies), stale or not,
-- whatever the breaker's state, once begin has the scope born: the
-- policies tell what the replicas run, not what was counted.
--
-- The window stores the layout it is written with (width, buckets). A
-- Record under another layout that counts outcomes first re-lays it by
-- time (relay below); generation and the run of failures stay.
local MIN_CALLS = tonumber(ARGV[8])
local FAILURE_PERMILLE = tonumber(ARGV[9])
local SLOW_PERMILLE = tonumber(ARGV[10])
local CONSECUTIVE_FAILURES = tonumber(ARGV[11])
local OPEN_FOR = tonumber(ARGV[12])
local BATCH = ARGV[13]
local RECENT_BATCHES = tonumber(ARGV[14])
local FINGERPRINT = ARGV[15]
local SOURCE = ARGV[16]
local ENCODING = ARGV[17]
local RECENT_POLICIES = tonumber(ARGV[18])
local OUTCOMES = 19 -- the first outcome's ARGV

WITH_BATCHES = true
local s = begin(stored())
-- One HSET per Record; only a new fingerprint prunes: the policies a
-- window old, and all but the newest RECENT_POLICIES.
if redis.call('HSET', KEY_STATE, 'policy:' .. FINGERPRINT, int(NOW) .. ' ' .. SOURCE .. ' ' .. ENCODING) == 1 then
  local live, old = seen_policies(NOW - WIDTH * BUCKETS)
  for i = RECENT_POLICIES + 1, #live do
    old[#old + 1] = 'policy:' .. live[i].fingerprint
  end
  hdel(KEY_STATE, old)
end
-- Disabled counts outcomes, for people to see, and never trips. A newborn
-- scope remembers no batch. The batch IDs are kept in the state hash, each
-- followed by a NUL byte.
local batches, batch_count = s.batches or '', s.batch_count or 0
if (s.state ~= CLOSED and s.state ~= DISABLED)
    or (BATCH ~= '' and string.find('\0' .. batches, '\0' .. BATCH .. '\0', 1, true)) then
  local n = 0
  for i = OUTCOMES + 2, #ARGV, 3 do
    n = n + tonumber(ARGV[i])
  end
  return reply(s, false, nil, n)
end

local function percent(pm)
  if pm % 10 == 0 then
    return string.format('%d%%', pm / 10)
  end
  return string.format('%d.%d%%', math.floor(pm / 10), pm % 10)
end

-- The window keeps running totals of its live buckets beside them, and
-- head, the newest bucket they cover: a Record reads a few fields, not
-- every bucket, and once the window has slid, only the buckets that left
-- it, to subtract them. The batch only adds to the current bucket, so the
-- rules cost O(1) per outcome. Locals, not table fields: the loop below
-- runs once per outcome. calls, failures, slow: the current bucket;
-- other_*: the other live buckets.
local calls, failures, slow = 0, 0, 0
local other_calls, other_failures, other_slow = 0, 0, 0
local head, relabel = IDX, true
-- laid: the window stores this Record's layout already.
local laid = false
-- gone: the buckets that left the window since head, subtracted from the
-- totals above and deleted with the save below. A Record that counts
-- nothing writes nothing: deleting them without saving the totals would
-- leave totals that still count them.
local gone = {}
-- Throttled requests (Policy.Throttle) are counted beside the buckets, in
-- fields throttled:<index>, with a running total of their own up to their
-- own head (throttled, throttled_head): a bucket keeps the form "calls
-- failures slow" that every reader of layout v2 knows, and the window of
-- a scope nobody throttles has none of these fields. throttled: the
-- current bucket's; other_throttled: the other live buckets';
-- throttled_head: false while there are none.
local throttled, other_throttled, throttled_head = 0, 0, false
local throttled_gone = {}
local tv = false

local function parse(v)
  if not v then
    return 0, 0, 0
  end
  local c, f, sl = string.match(v, '^(%d+) (%d+) (%d+)$')
  return tonumber(c), tonumber(f), tonumber(sl)
end

-- relaid: the fields of the re-laid buckets other than the current one,
-- written after the save that starts the window afresh.
local relaid = {}

-- relay re-lays a window written with layout width0 x buckets0 into this
-- Record's, by time: the counts of each bucket live under the old layout
-- go to the bucket of this layout that holds the old bucket's last
-- millisecond (or now), so that they keep their age and leave the window
-- when this layout says, even while replicas of two layouts alternate;
-- counts that lie wholly before this layout's window have left it. Nothing
-- is counted twice. It sets the current bucket's counts, the others'
-- totals and the throttled requests, and fills relaid.
local function relay(width0, buckets0)
  local idx0 = math.floor(NOW / width0)
  local function target(i)
    local j = math.floor(math.min((i + 1) * width0 - 1, NOW) / WIDTH)
    if i <= idx0 - buckets0 or i > idx0 or j <= IDX - BUCKETS then
      return false
    end
    return j
  end
  local into, thr = {}, {}
  local raw = redis.call('HGETALL', KEY_WINDOW)
  for k = 1, #raw, 2 do
    local i, t = tonumber(raw[k]), throttled_index(raw[k])
    local j = target(i or t or -1)
    if i and j then
      local c, f, sl = parse(raw[k + 1])
      local b = into[j] or {0, 0, 0}
      into[j] = {b[1] + c, b[2] + f, b[3] + sl}
    elseif t and j then
      thr[j] = (thr[j] or 0) + tonumber(raw[k + 1])
    end
  end
  for j, b in pairs(into) do
    if j == IDX then
      calls, failures, slow = b[1], b[2], b[3]
    else
      other_calls, other_failures, other_slow = other_calls + b[1], other_failures + b[2], other_slow + b[3]
      relaid[#relaid + 1], relaid[#relaid + 2] = int(j), string.format('%d %d %d', b[1], b[2], b[3])
    end
  end
  for j, n in pairs(thr) do
    throttled_head = IDX
    if j == IDX then
      throttled = n
    else
      other_throttled = other_throttled + n
      relaid[#relaid + 1], relaid[#relaid + 2] = 'throttled:' .. int(j), int(n)
    end
  end
end

if not s.newborn then
  local v = redis.call('HMGET', KEY_WINDOW, 'generation', 'head', 'calls', 'failures', 'slow', int(IDX),
    'throttled', 'throttled_head', 'throttled:' .. int(IDX), 'width', 'buckets')
  if v[1] == int(s.generation) then
    relabel = false
    tv = v
    head = tonumber(v[2])
    laid = v[10] == int(WIDTH) and v[11] == int(BUCKETS)
    if v[10] and not laid then
      -- Written with another layout: re-laid into this one, in a window
      -- started afresh. A window with no layout stored was written with
      -- this one.
      relay(tonumber(v[10]), tonumber(v[11]))
      relabel, tv, head = true, false, IDX
    elseif not head then
      -- Written without totals: sum the buckets once.
      local w = window(s)
      gone = w.dead
      calls, failures, slow = w.current.calls, w.current.failures, w.current.slow
      other_calls, other_failures, other_slow = w.others.calls, w.others.failures, w.others.slow
      head = IDX
    elseif IDX - head >= BUCKETS then
      -- Every bucket has left the window.
      relabel, head = true, IDX
    else
      local total_calls, total_failures, total_slow = tonumber(v[3]), tonumber(v[4]), tonumber(v[5])
      if head < IDX then
        for i = head - BUCKETS + 1, IDX - BUCKETS do
          gone[#gone + 1] = int(i)
        end
        if #gone > 0 then
          for _, b in ipairs(redis.call('HMGET', KEY_WINDOW, unpack(gone))) do
            local c, f, sl = parse(b)
            total_calls, total_failures, total_slow = total_calls - c, total_failures - f, total_slow - sl
          end
        end
        head = IDX
      end
      -- With a clock that went back, IDX lies below head: its bucket is
      -- counted while it is within the buckets head covers.
      calls, failures, slow = parse(v[6])
      other_calls, other_failures, other_slow = total_calls - calls, total_failures - failures, total_slow - slow
    end
  end
end
if not relabel and tv and tv[8] then
  local total
  total, throttled_head = tonumber(tv[7]), tonumber(tv[8])
  for i = throttled_head - BUCKETS + 1, math.min(throttled_head, IDX - BUCKETS) do
    throttled_gone[#throttled_gone + 1] = 'throttled:' .. int(i)
  end
  if #throttled_gone > 0 then
    for _, n in ipairs(redis.call('HMGET', KEY_WINDOW, unpack(throttled_gone))) do
      total = total - tonumber(n or 0)
    end
  end
  throttled_head = math.max(throttled_head, IDX)
  throttled = tonumber(tv[9] or 0)
  other_throttled = total - throttled
end
local consecutive = s.consecutive_failures

local function trip_reason()
  if s.state == DISABLED then
    return false
  end
  if CONSECUTIVE_FAILURES > 0 and consecutive >= CONSECUTIVE_FAILURES then
    return string.format('consecutive failures %d >= %d', consecutive, CONSECUTIVE_FAILURES)
  end
  local all = other_calls + calls
  if all < MIN_CALLS then
    return false
  end
  local failed, slowed = other_failures + failures, other_slow + slow
  -- integer math: 0.5 must trip at exactly 2 of 4
  if FAILURE_PERMILLE > 0 and failed * 1000 >= FAILURE_PERMILLE * all then
    return string.format('failures %d/%d >= %s', failed, all, percent(FAILURE_PERMILLE))
  end
  if SLOW_PERMILLE > 0 and slowed * 1000 >= SLOW_PERMILLE * all then
    return string.format('slow calls %d/%d >= %s', slowed, all, percent(SLOW_PERMILLE))
  end
  return false
end

-- The batch is remembered with whatever this Record saves, a trip
-- included; a Record that counts nothing saves nothing.
if BATCH ~= '' then
  batches, batch_count = batches .. BATCH .. '\0', batch_count + 1
  if batch_count > RECENT_BATCHES then
    batches, batch_count = string.sub(batches, string.find(batches, '\0', 1, true) + 1), batch_count - 1
  end
  s.batches, s.batch_count, s.batches_changed = batches, batch_count, true
end

local generation = int(s.generation)
local stale, counted = 0, 0
local tr = false

-- check trips the breaker if a rule holds.
local function check()
  local reason = trip_reason()
  if reason then
    open(s, OPEN_FOR)
    tripped(s, reason, other_calls + calls, other_failures + failures, other_slow + slow)
    tr = transition(s, CLOSED, reason)
  end
end

for i = OUTCOMES, #ARGV, 3 do
  local n = tonumber(ARGV[i + 2])
  if tr or ARGV[i] ~= generation then
    stale = stale + n
  elseif ARGV[i + 1] == '4' then
    -- Throttled requests are no calls: the rules read nothing they change.
    throttled, counted = throttled + n, counted + n
  elseif ARGV[i + 1] == '0' then
    -- A run of plain successes: after the first, the consecutive count is
    -- 0 and both ratios only fall, so a rule can first hold at the first
    -- one, or where the calls reach MinCalls. The rules are checked there
    -- alone; the rest of the run after a trip is stale.
    local before = other_calls + calls
    local at = {1}
    if before + 1 < MIN_CALLS and before + n >= MIN_CALLS then
      at[2] = MIN_CALLS - before
    end
    local done = 0
    for _, k in ipairs(at) do
      if k <= n then
        calls, consecutive, done = calls + k - done, 0, k
        check()
        if tr then
          break
        end
      end
    end
    if not tr then
      calls, done = calls + n - done, n
    end
    counted, stale = counted + done, stale + n - done
  else
    local failed, slowed = ARGV[i + 1] == '1' or ARGV[i + 1] == '3', ARGV[i + 1] == '2' or ARGV[i + 1] == '3'
    for j = 1, n do
      if tr then
        stale = stale + n - j + 1
        break
      end
      counted, calls = counted + 1, calls + 1
      if failed then
        failures, consecutive = failures + 1, consecutive + 1
      else
        consecutive = 0
      end
      if slowed then
        slow = slow + 1
      end
      check()
    end
  end
end

if counted == 0 then
  return reply(s, false, nil, stale)
end
if not tr then
  s.consecutive_failures, s.expires_at = consecutive, keep()
  save(s, relabel)
  hdel(KEY_WINDOW, gone)
  redis.call('HSET', KEY_WINDOW, int(IDX), string.format('%d %d %d', calls, failures, slow), 'head', int(head),
    'calls', int(other_calls + calls), 'failures', int(other_failures + failures), 'slow', int(other_slow + slow))
  if #relaid > 0 then
    redis.call('HSET', KEY_WINDOW, unpack(relaid))
  end
  if relabel or not laid then
    redis.call('HSET', KEY_WINDOW, 'width', int(WIDTH), 'buckets', int(BUCKETS))
  end
  hdel(KEY_WINDOW, throttled_gone)
  if throttled > 0 then
    redis.call('HSET', KEY_WINDOW, 'throttled:' .. int(IDX), int(throttled),
      'throttled', int(other_throttled + throttled), 'throttled_head', int(throttled_head or IDX))
  elseif throttled_head and other_throttled > 0 then
    redis.call('HSET', KEY_WINDOW, 'throttled', int(other_throttled), 'throttled_head', int(throttled_head))
  elseif throttled_head then
    -- The last throttled request has left the window.
    redis.call('HDEL', KEY_WINDOW, 'throttled', 'throttled_head')
  end
  return reply(s, false, nil, stale, other_calls + calls, other_failures + failures, other_slow + slow,
    other_throttled + throttled)
end
return reply(s, tr, nil, stale)
