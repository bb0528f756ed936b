-- record.lua: Record. Runs after lib.lua.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 min calls, 9 failure permille (0 = off),
--   10 slow permille (0 = off), 11 consecutive failures (0 = off),
--   12 open for ms, 13 batch ID ('' = none), 14 how many batch IDs to
--   remember, 15 the fingerprint of the Record's policy
--   (Policy.Fingerprint), 16 its source (coordinator.PolicySource, decimal),
--   17 its encoding (Policy.Encode), 18 how many policies to remember
--   (implement.RecentPolicies), 19 the replica (RecordRequest.Replica),
--   20 outliers (Policy.Outliers; 0 = the plain rules), 21 max open for
--   ms (0 = no back-off), 22 how many replicas to track
--   (implement.TrackedReplicas), 23 how many times the rest of the
--   fleet's share of failures a replica's must be to make it an outlier
--   (implement.Markedly), 24 back off after ms (Policy.BackoffAfter),
--   25 how many generations follow with
--   calls a dry run would have rejected (Outcome.WouldReject), then two
--   values for each: the generation (decimal) and how many; then three
--   values per run of equal outcomes, in order: their generation
--   (decimal), flags (1 = failure, 2 = slow, 3 = both, 4 = throttled: a
--   request the caller rejected itself, no call; 8 with 1 = a stalled
--   call, Outcome.Stalled; 16 with any but 4 = an outlier's probe,
--   Outcome.Probe) and how many
-- Reply: see reply in lib.lua, then stale, the outcomes of other
--   generations; when the Record counted and left the breaker closed, the
--   window's calls, failures, slow and throttled; and what mod.answer
--   (replicas.lua) adds of the Record's replica.
--
-- Every Record carries its policy (Snapshot.Policies), stale or not,
-- whatever the breaker's state, once begin has the scope born: the
-- policies tell what the replicas run, not what was counted.
--
-- The window stores the layout it is written with (width, buckets) and
-- the start of the last bucket a Record of that layout counted in
-- (laid_at). A Record under
-- another layout that counts outcomes counts in the window's layout while
-- that was within a window of it, and else first re-lays the window by
-- time into its own (relay below); generation and the run of failures
-- stay.
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
local REPLICA = ARGV[19]
local OUTLIERS = tonumber(ARGV[20])
local MAX_OPEN_FOR = tonumber(ARGV[21])
local TRACKED_REPLICAS = tonumber(ARGV[22])
local MARKEDLY = tonumber(ARGV[23])
local BACKOFF_AFTER = tonumber(ARGV[24])
local WOULD = 26 -- the first would-be rejections' ARGV
local OUTCOMES = WOULD + 2 * tonumber(ARGV[25]) -- the first run's ARGV

-- PROBE is the ARGV of the first run marked as an outlier's probe
-- (false: none), whose mark is taken off here: the rest reads the flags
-- of the outcome alone.
local PROBE = false
for i = OUTCOMES + 1, #ARGV, 3 do
  local flags = tonumber(ARGV[i])
  if flags >= 16 then
    ARGV[i] = tostring(flags - 16)
    PROBE = PROBE or i - 1
  end
end

local REPLICA_FIELD = REPLICA_PREFIX .. REPLICA
local IDX_S, WIDTH_S = int(IDX), int(WIDTH)

-- The replicas (replicas.lua): MOD, the module, and R, the replica's
-- rules (mod.rules), are made only when this Record needs them: the
-- replica has an entry, or a failure or slow call to attribute, or the
-- window holds entries to judge or to re-lay. Without R the replica has
-- no entry, the window none worth leaving out, and the plain rules
-- decide.
local MOD, R = false, false
local function mod()
  if not MOD then
    MOD = replicas_module()
  end
  return MOD
end

local s = begin(stored(RECORD_FIELDS))
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
local seen_batch = BATCH ~= '' and string.find('\0' .. batches, '\0' .. BATCH .. '\0', 1, true)
-- Calls a dry run would have rejected: counted in their generation,
-- whatever the state, and no calls.
if not seen_batch and OUTCOMES > WOULD then
  local would = 0
  for i = WOULD, OUTCOMES - 1, 2 do
    if ARGV[i] == int(s.generation) then
      would = would + tonumber(ARGV[i + 1])
    end
  end
  if would > 0 then
    would = would + tonumber(redis.call('HGET', KEY_STATE, 'would_reject') or 0)
    redis.call('HSET', KEY_STATE, 'would_reject', int(would))
  end
end
if (s.state ~= CLOSED and s.state ~= DISABLED) or seen_batch then
  local n = 0
  for i = OUTCOMES + 2, #ARGV, 3 do
    n = n + tonumber(ARGV[i])
  end
  if OUTLIERS > 0 and not s.newborn then
    -- A retried batch: the answer still says whether the replica is an
    -- outlier.
    local v = redis.call('HMGET', KEY_WINDOW, 'generation', 'width', 'buckets', REPLICA_FIELD)
    if v[1] == int(s.generation) and v[4] then
      local codec = mod().codec()
      local e = codec.parse(REPLICA, v[4])
      if e.till ~= 0 and not codec.dead(e, NOW, tonumber(v[2] or WIDTH), tonumber(v[3] or BUCKETS)) then
        return MOD.answer(s, false, n, {x = e})
      end
    end
  end
  return reply(s, false, nil, 'stale', n)
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
-- laid: the window stores this Record's layout already, or the one it
-- counts in; own: the layout is this Record's own, not the window's of
-- replicas that still record; laid_at: the window's (see above), false
-- when unread.
local laid, own, laid_at = false, true, false
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
-- written after the save that starts the window afresh; and of the
-- buckets an outlier's counts left; by field.
local relaid = {}
-- adopt: the window's fields and the re-laying of its buckets, when the
-- window starts afresh within its generation, for R to take its entries
-- from (false: it does not).
local adopt, adopt_target = false, false

-- The replicas as stored (replicas.lua), read as little as a Record
-- needs: raw, the window's replicas field (false: none); epoch from it,
-- once needed (false until then); heard, the state's reporters field, and
-- reporters, the list it holds, once parsed (false until then); the
-- replica's own entry and the layout it was written with. counts_changed:
-- write tracked or epoch; heard_changed: write the reporters.
local raw, epoch, tracked, reporters = false, false, 0, false
local heard = s.reporters
-- The numbers of the window's HMGET below, by position.
local WINDOW_NUMBERS = {[2] = 'head', [3] = 'calls', [4] = 'failures', [5] = 'slow', [7] = 'throttled',
  [8] = 'throttled_head', [10] = 'width', [11] = 'buckets', [12] = 'laid_at'}
local own_raw, own_width, own_buckets = false, WIDTH, BUCKETS
local counts_changed, heard_changed = false, false
-- The window's recent field (false: none), read below.
local recent_raw = false

if not s.newborn then
  local v
  if OUTLIERS > 0 then
    v = redis.call('HMGET', KEY_WINDOW, 'generation', 'head', 'calls', 'failures', 'slow', IDX_S,
      'throttled', 'throttled_head', 'throttled:' .. IDX_S, 'width', 'buckets', 'laid_at', 'recent', 'replicas', REPLICA_FIELD)
  else
    v = redis.call('HMGET', KEY_WINDOW, 'generation', 'head', 'calls', 'failures', 'slow', IDX_S,
      'throttled', 'throttled_head', 'throttled:' .. IDX_S, 'width', 'buckets', 'laid_at', 'recent', 'replicas')
  end
  -- Its numbers, read as strings below, are checked once (stored_int).
  for i, field in pairs(WINDOW_NUMBERS) do
    stored_int('window', field, v[i])
  end
  if v[1] == int(s.generation) then
    relabel = false
    tv = v
    head = tonumber(v[2])
    laid, laid_at = v[10] == WIDTH_S and v[11] == int(BUCKETS), v[12] or false
    if v[10] and not laid and NOW - tonumber(laid_at or 0) < tonumber(v[10]) * tonumber(v[11]) then
      -- Another layout, and a Record of it counted within a window of
      -- it: its replicas still record, and this Record counts in it, as
      -- if it were its own (WIDTH, BUCKETS and IDX are lib.lua's).
      WIDTH, BUCKETS = tonumber(v[10]), tonumber(v[11])
      IDX = math.floor(NOW / WIDTH)
      IDX_S, WIDTH_S = int(IDX), int(WIDTH)
      local cur = redis.call('HMGET', KEY_WINDOW, IDX_S, 'throttled:' .. IDX_S)
      v[6], v[9] = cur[1], cur[2]
      laid, own = true, false
    end
    recent_raw = v[13] or false
    raw = v[14] or false
    if v[15] then
      own_raw, own_width, own_buckets = v[15], tonumber(v[10] or WIDTH), tonumber(v[11] or BUCKETS)
    end
    if v[10] and not laid then
      -- Written with another layout, whose replicas no longer record:
      -- re-laid into this one, in a window started afresh. A window with
      -- no layout stored was written with this one. (Defined here, where it runs: a Lua closure costs
      -- every Record that makes it, used or not; replicas.lua says how
      -- much.)
      -- relay re-lays a window written with layout width0 x buckets0 into
      -- this Record's, by time: the counts of each bucket live under the
      -- old layout go to the bucket of this layout that holds the old
      -- bucket's first millisecond, so that none moves later than it was
      -- counted; counts whose bucket starts before this layout's window
      -- have left it. Nothing is counted twice. It sets the current
      -- bucket's counts, the others' totals and the throttled requests,
      -- and fills relaid; the replicas' own buckets are re-laid alike
      -- (adopt).
      local function relay(width0, buckets0)
        local idx0 = math.floor(NOW / width0)
        local function target(i)
          local j = math.floor(i * width0 / WIDTH)
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
        adopt, adopt_target = raw, target
        for j, b in pairs(into) do
          if j == IDX then
            calls, failures, slow = b[1], b[2], b[3]
          else
            other_calls, other_failures, other_slow = other_calls + b[1], other_failures + b[2], other_slow + b[3]
            relaid[int(j)] = string.format('%d %d %d', b[1], b[2], b[3])
          end
        end
        for j, n in pairs(thr) do
          throttled_head = IDX
          if j == IDX then
            throttled = n
          else
            other_throttled = other_throttled + n
            relaid['throttled:' .. int(j)] = int(n)
          end
        end
      end
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
      -- Every bucket has left the window; the replicas stay.
      adopt = redis.call('HGETALL', KEY_WINDOW)
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
-- stalled.run: the stalled calls in the run (Outcome.Stalled); a table,
-- so that the reasons (replicas.lua reason_of) read it as it is.
local stalled = {run = s.consecutive_stalls}
local generation = int(s.generation)

-- The first run this Record counts, whether one is of its generation
-- (the replica is heard), and whether one is a failure or slow.
local first, current, bad = OUTCOMES, false, false
for i = OUTCOMES, #ARGV, 3 do
  if ARGV[i] == generation then
    current, bad = true, bad or (ARGV[i + 1] ~= '0' and ARGV[i + 1] ~= '4')
  end
end
if raw and string.sub(raw, 1, 2) ~= '0 ' then
  tracked = tonumber(string.match(raw, '^(%d+)'))
end

-- The recent rule (docs/architecture.md): rec is the fleet's excursion,
-- the window's recent field "<failures> <slow> <calls> <since> <number>
-- <stalled>" (stalled: of the failures; a field written before stalls
-- were counted lacks it):
-- the calls counted since failures or slow calls began to outrun the
-- policy's ratios (since, ms), and the number of the excursion, so that a
-- replica's share of an ended one reads as none. Its calls are at least
-- those the fleet's pace says it made since it began: the calls of the
-- bucket before the current one, per bucket width, as this Record found
-- them.
local rec = {f = 0, s = 0, c = 0, since = 0, num = 0, st = 0}
if recent_raw then
  local f, sl, n, since, num, st = string.match(recent_raw, '^(%d+) (%d+) (%d+) (%d+) (%d+) ?(%d*)$')
  if not num then
    error(string.format('window hash field recent holds %q', string.sub(recent_raw, 1, 64)))
  end
  rec.f, rec.s, rec.c, rec.since, rec.num = tonumber(f), tonumber(sl), tonumber(n), tonumber(since), tonumber(num)
  rec.st = tonumber(st) or 0
end
-- REC_ON: the Record counts in the excursion, which it does when a ratio
-- is on and the Record has a failure or slow call, or an excursion holds
-- calls. Only then are the helpers below made: a closure costs every
-- Record that makes it, and a healthy scope's Records need none.
local REC_ON = (FAILURE_PERMILLE > 0 or SLOW_PERMILLE > 0) and (bad or rec.c > 0)
local rec_changed = false
local rec_over, rec_spent, rec_bad, rec_successes
if REC_ON then
-- The pace is known once the bucket before the current one is whole (the
-- one before it has calls: the window began before it) and holds MinCalls
-- calls. Until then (a young fleet, a fresh generation, a quiet scope) a
-- replica's failures sent at once while the others hold their successes
-- would look like a brownout: the recent rule waits, the window's rules
-- judge. A bucket re-laid by this Record is in relaid; a window started
-- afresh holds no other.
local PACE_CALLS, PACE_PER = 0, 0
if BUCKETS >= 3 then
  local prev = {relaid[int(IDX - 1)] or false, relaid[int(IDX - 2)] or false}
  if not relabel then
    prev = redis.call('HMGET', KEY_WINDOW, int(IDX - 1), int(IDX - 2))
  end
  local last, before = parse(prev[1]), parse(prev[2])
  if before > 0 and last >= MIN_CALLS then
    PACE_CALLS, PACE_PER = last, WIDTH
  end
end
rec.paced = PACE_PER > 0
-- rec_over is the excursion's calls: those counted, or the pace's if more.
rec_over = function()
  if rec.c == 0 then
    return 0
  end
  local paced = 0
  if PACE_PER > 0 and NOW > rec.since then
    paced = math.floor(PACE_CALLS * (NOW - rec.since) / PACE_PER)
  end
  return math.max(rec.c, paced)
end
rec.over = rec_over
-- rec_spent: the excursion holds calls and no enabled ratio's excess any
-- more, or began a window ago: the next call starts afresh.
rec_spent = function()
  if rec.c == 0 then
    return false
  end
  if NOW - rec.since >= WIDTH * BUCKETS then
    return true
  end
  local over = rec_over()
  return (FAILURE_PERMILLE == 0 or 1000 * rec.f <= FAILURE_PERMILLE * over) and
    (SLOW_PERMILLE == 0 or 1000 * rec.s <= SLOW_PERMILLE * over)
end
-- rec_bad counts a failure (stalled or not) or slow call, which starts
-- an excursion if none holds calls, after ending a spent one.
rec_bad = function(failed, slowed, stall)
  if rec_spent() then
    rec.f, rec.s, rec.c, rec.num, rec.st = 0, 0, 0, rec.num + 1, 0
  end
  if rec.c == 0 then
    rec.since = NOW
  end
  rec.c = rec.c + 1
  if failed then
    rec.f = rec.f + 1
  end
  if stall then
    rec.st = rec.st + 1
  end
  if slowed then
    rec.s = rec.s + 1
  end
  rec_changed = true
end
-- rec_successes counts n successes, as many as the excursion holds before
-- it is spent (then it ends, and the rest count in none), and returns how
-- many counted and in which excursion.
rec_successes = function(n)
  local num = rec.num
  if rec.c == 0 or n <= 0 then
    return 0, num
  end
  -- k: the success before which the excursion is spent
  local k = 1
  if NOW - rec.since < WIDTH * BUCKETS then
    local over = rec_over()
    if FAILURE_PERMILLE > 0 and FAILURE_PERMILLE * over < 1000 * rec.f then
      k = math.floor((1000 * rec.f + FAILURE_PERMILLE - 1) / FAILURE_PERMILLE) - rec.c + 1
    end
    if SLOW_PERMILLE > 0 and SLOW_PERMILLE * over < 1000 * rec.s then
      k = math.max(k, math.floor((1000 * rec.s + SLOW_PERMILLE - 1) / SLOW_PERMILLE) - rec.c + 1)
    end
  end
  rec_changed = true
  if k > n then
    rec.c = rec.c + n
    return n, num
  end
  rec.f, rec.s, rec.c, rec.num, rec.st = 0, 0, 0, rec.num + 1, 0
  return k - 1, num
end
end

-- J is R when the policy judges the replicas: a Record under the plain
-- rules (Outliers 0) attributes nothing and finds no outlier, but keeps
-- the replicas when it starts the window afresh.
local J = false
if (OUTLIERS > 0 and (own_raw or tracked > 0 or bad)) or (adopt and raw) then
  epoch = tonumber(string.match(raw or '0 0', '^%d+ (%d+)'))
  reporters = mod().reporters(heard)
  R = MOD.rules({NOW = NOW, IDX = IDX, FROM = IDX - BUCKETS + 1, WIDTH = WIDTH, BUCKETS = BUCKETS,
    KEY_WINDOW = KEY_WINDOW, REPLICA = REPLICA, OUTLIERS = OUTLIERS, TRACKED_REPLICAS = TRACKED_REPLICAS,
    MIN_CALLS = MIN_CALLS, FAILURE_PERMILLE = FAILURE_PERMILLE, SLOW_PERMILLE = SLOW_PERMILLE,
    CONSECUTIVE_FAILURES = CONSECUTIVE_FAILURES, OPEN_FOR = OPEN_FOR, MAX_OPEN_FOR = MAX_OPEN_FOR,
    BACKOFF_AFTER = BACKOFF_AFTER, reopen_for = reopen_for,
    tracked = tracked, reporters = reporters, relaid = relaid, parse = parse, rec = rec, MARKEDLY = MARKEDLY,
    stalled = stalled})
  if own_raw then
    R.own(own_raw, own_width, own_buckets)
  end
  if adopt then
    R.adopt(adopt, adopt_target)
  end
  J = OUTLIERS > 0 and R
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

local stale, counted = 0, 0
local tr = false

if J and J.x and J.x.till ~= 0 then
  -- An outlier: its outcomes are stale while its period lasts, and
  -- after it until its probe, the first of the generation so marked.
  local probe = PROBE and ARGV[PROBE] == generation and PROBE
  local total = 0
  for i = OUTCOMES, #ARGV, 3 do
    total = total + tonumber(ARGV[i + 2])
  end
  if NOW < R.x.till or not probe then
    return MOD.answer(s, false, total, R)
  end
  if ARGV[probe + 1] ~= '0' then
    -- Failed, or too slow.
    R.probe(true)
    redis.call('HSET', KEY_WINDOW, REPLICA_FIELD, R.codec.encode(R.x))
    if s.batches_changed then
      redis.call('HSET', KEY_STATE, 'batches', s.batches, 'batch_count', int(s.batch_count))
    end
    return MOD.answer(s, false, total - 1, R)
  end
  R.probe(false)
  current = false
  for i = OUTCOMES, #ARGV, 3 do
    if i < probe then
      stale = stale + tonumber(ARGV[i + 2])
    else
      current = current or ARGV[i] == generation
    end
  end
  first = probe
end

if R then
  R.settle_own()
end

if OUTLIERS > 0 and current then
  -- heard: the replica recorded now. The breaker keeps 2 x Outliers + 1
  -- of the replicas heard last, an entry replaced only by a Record of a
  -- later bucket. Most Records find the replica listed in this bucket,
  -- or the list full of replicas of this bucket, and change nothing.
  local capacity = 2 * OUTLIERS + 1
  local settled = false
  if not reporters and heard then
    local tag = '|' .. int(IDX * WIDTH) .. ':'
    if string.find(heard, tag .. REPLICA .. '|', 1, true) then
      settled = true
    else
      local here, all, pos = 0, -1, 1
      repeat
        pos = string.find(heard, tag, pos, true)
        here, pos = here + (pos and 1 or 0), pos and pos + 1
      until not pos
      pos = 1
      repeat
        pos = string.find(heard, '|', pos, true)
        all, pos = all + (pos and 1 or 0), pos and pos + 1
      until not pos
      settled = here == capacity and all == capacity
    end
  end
  if not settled then
    reporters = reporters or mod().reporters(heard)
    local mine, oldest = false, false
    for i, rp in ipairs(reporters) do
      if rp.id == REPLICA then
        mine = rp
      end
      if not oldest or rp.at < reporters[oldest].at then
        oldest = i
      end
    end
    local start = IDX * WIDTH
    if mine then
      if math.floor(mine.at / WIDTH) ~= IDX then
        mine.at, heard_changed = start, true
      end
    elseif #reporters < capacity then
      reporters[#reporters + 1], heard_changed = {id = REPLICA, at = start}, true
    elseif math.floor(reporters[oldest].at / WIDTH) < IDX then
      reporters[oldest], heard_changed = {id = REPLICA, at = start}, true
    end
    while #reporters > capacity do
      oldest = 1
      for i, rp in ipairs(reporters) do
        if rp.at < reporters[oldest].at then
          oldest = i
        end
      end
      table.remove(reporters, oldest)
      heard_changed = true
    end
  end
end

-- check trips the breaker for the fleet if a rule holds, checked in the
-- order consecutive failures, failure ratio, slow-call ratio, recent
-- failures, recent slow calls, or else, after a failure or slow call
-- (failed, slowed), makes the replica an outlier if its own outcomes trip
-- one. The recent rule is judged after a failure (or slow call) alone:
-- nothing else raises it. With J a rule holds for the fleet only if it
-- holds as well without the replicas J leaves out, and the reason gives
-- the counts without them. (One closure: each costs every Record that
-- makes it, by what it captures.)
local function check(failed, slowed)
  if s.state == DISABLED then
    return
  end
  local all, failed_all, sl_all = other_calls + calls, other_failures + failures, other_slow + slow
  -- reason: true while a plain rule holds (no J), whose reason is made
  -- once, below.
  local rule, n, of, reason = false, 0, 0, false
  if CONSECUTIVE_FAILURES > 0 and consecutive >= CONSECUTIVE_FAILURES then
    rule, n, of = 'run', consecutive, 0
    reason = not J or J.broad(rule, n, of, epoch)
  end
  -- integer math: 0.5 must trip at exactly 2 of 4
  if not reason and all >= MIN_CALLS and FAILURE_PERMILLE > 0 and failed_all * 1000 >= FAILURE_PERMILLE * all then
    rule, n, of = 'failures', failed_all, all
    reason = not J or J.broad(rule, n, of, epoch)
  end
  if not reason and all >= MIN_CALLS and SLOW_PERMILLE > 0 and sl_all * 1000 >= SLOW_PERMILLE * all then
    rule, n, of = 'slow', sl_all, all
    reason = not J or J.broad(rule, n, of, epoch)
  end
  if not reason and failed and FAILURE_PERMILLE > 0 and rec.c > 0 and rec.paced then
    rule, n, of = 'recent', rec.f, rec_over()
    reason = (J and J.broad(rule, n, of, epoch)) or (not J and 1000 * n - FAILURE_PERMILLE * of >= 1000 * MIN_CALLS)
  end
  if not reason and slowed and SLOW_PERMILLE > 0 and rec.c > 0 and rec.paced then
    rule, n, of = 'recent_slow', rec.s, rec_over()
    reason = (J and J.broad(rule, n, of, epoch)) or (not J and 1000 * n - SLOW_PERMILLE * of >= 1000 * MIN_CALLS)
  end
  if reason == true then
    local c = {CONSECUTIVE_FAILURES = CONSECUTIVE_FAILURES, FAILURE_PERMILLE = FAILURE_PERMILLE,
      SLOW_PERMILLE = SLOW_PERMILLE, stalled = stalled, rec = rec}
    reason = mod().reason_of(c, rule, n, of, '', mod().stalls(c, rule))
  end
  if reason then
    open(s, OPEN_FOR, s.generation)
    tripped(s, reason, all, failed_all, sl_all)
    tr = transition(s, CLOSED, reason)
    return
  end
  if J and J.x and (failed or slowed) then
    reason = J.own_reason(all, failed_all, sl_all)
    if reason then
      calls, failures, slow, other_calls, other_failures, other_slow, consecutive =
        J.isolate(reason, calls, failures, slow, other_calls, other_failures, other_slow, consecutive, epoch)
    end
  end
end

for i = first, #ARGV, 3 do
  local n = tonumber(ARGV[i + 2])
  -- The fleet tripped, or the replica was found an outlier: the rest is
  -- stale.
  if tr or (J and J.found()) or ARGV[i] ~= generation then
    stale = stale + n
  elseif ARGV[i + 1] == '4' then
    -- Throttled requests are no calls: the rules read nothing they change.
    throttled, counted = throttled + n, counted + n
  elseif ARGV[i + 1] == '0' then
    -- A run of plain successes: after the first, the runs are 0 and every
    -- ratio only falls, so a rule can first hold at the first one, or
    -- where the calls it counts reach MinCalls: the fleet's, the fleet's
    -- without the replicas a rule leaves out. The rules are checked there
    -- alone; the rest of the run after a trip is stale. The recent rule,
    -- and whether the replica is an outlier, are judged after failures
    -- and slow calls only.
    local at = {1}
    local before = other_calls + calls
    if before + 1 < MIN_CALLS and before + n >= MIN_CALLS then
      at[#at + 1] = MIN_CALLS - before
    end
    if J then
      if s.state ~= DISABLED then
        J.crossings(at, n, other_calls + calls, other_failures + failures, other_slow + slow, epoch)
      end
      table.sort(at)
    end
    local applied = 0
    for _, k in ipairs(at) do
      if k <= n and k > applied then
        if applied == 0 and consecutive > 0 then
          epoch = (epoch or tonumber(string.match(raw or '0 0', '^%d+ (%d+)'))) + 1
          counts_changed = true
        end
        calls, consecutive, stalled.run = calls + k - applied, 0, 0
        if J then
          J.attribute(false, false, k - applied, epoch)
        end
        if REC_ON and (OUTLIERS == 0 or (J and J.joined())) then
          local m, num = rec_successes(k - applied)
          if J then
            J.share(false, false, m, num)
          end
        end
        applied = k
        check(false, false)
        if tr or (J and J.found()) then
          break
        end
      end
    end
    if not (tr or (J and J.found())) then
      calls = calls + n - applied
      if J and n > applied then
        J.attribute(false, false, n - applied, epoch)
      end
      if REC_ON and (OUTLIERS == 0 or (J and J.joined())) then
        local m, num = rec_successes(n - applied)
        if J then
          J.share(false, false, m, num)
        end
      end
      applied = n
    end
    counted, stale = counted + applied, stale + n - applied
  else
    local flags = tonumber(ARGV[i + 1])
    local failed, slowed, stall = flags % 2 == 1, math.floor(flags / 2) % 2 == 1, flags >= 8
    for j = 1, n do
      if tr or (J and J.found()) then
        stale = stale + n - j + 1
        break
      end
      counted, calls = counted + 1, calls + 1
      if failed then
        failures, consecutive = failures + 1, consecutive + 1
        if stall then
          stalled.run = stalled.run + 1
        end
      else
        if consecutive > 0 then
          epoch = (epoch or tonumber(string.match(raw or '0 0', '^%d+ (%d+)'))) + 1
          counts_changed = true
        end
        consecutive, stalled.run = 0, 0
      end
      if slowed then
        slow = slow + 1
      end
      if J then
        J.attribute(failed, slowed, 1, epoch)
      end
      if REC_ON then
        rec_bad(failed, slowed, stall)
        if J then
          J.share(failed, slowed, 1, rec.num)
        end
      end
      check(failed, slowed)
    end
  end
end

-- moved: the replica is an outlier or has a transition of its own, which
-- the answer says.
local moved = J and ((J.x and J.x.till ~= 0) or J.own_tr)
if counted == 0 then
  if moved then
    return MOD.answer(s, false, stale, R)
  end
  return reply(s, false, nil, 'stale', stale)
end
-- The replicas heard outlive the generation.
if heard_changed or (R and R.heard_changed) then
  redis.call('HSET', KEY_STATE, 'reporters', mod().field(reporters))
end
if tr then
  -- The fleet tripped: the window started afresh with the generation.
  return reply(s, tr, nil, 'stale', stale)
end
s.consecutive_failures, s.consecutive_stalls, s.expires_at = consecutive, stalled.run, keep()
save(s, relabel)
hdel(KEY_WINDOW, gone)
-- laid_at, written once a bucket.
if own and (relabel or laid_at ~= int(IDX * WIDTH)) then
  redis.call('HSET', KEY_WINDOW, IDX_S, string.format('%d %d %d', calls, failures, slow), 'head', int(head),
    'calls', int(other_calls + calls), 'failures', int(other_failures + failures), 'slow', int(other_slow + slow),
    'laid_at', int(IDX * WIDTH))
else
  redis.call('HSET', KEY_WINDOW, IDX_S, string.format('%d %d %d', calls, failures, slow), 'head', int(head),
    'calls', int(other_calls + calls), 'failures', int(other_failures + failures), 'slow', int(other_slow + slow))
end
local fields = {}
for field, value in pairs(relaid) do
  fields[#fields + 1], fields[#fields + 2] = field, value
end
if R then
  hdel(KEY_WINDOW, R.dropped)
  for _, v in ipairs(R.fields(relabel)) do
    fields[#fields + 1] = v
  end
  counts_changed = counts_changed or R.tracked ~= tracked
  tracked = R.tracked
end
-- A run's number changed matters only once there are replicas to judge.
if (counts_changed and (raw or R)) or (relabel and raw) then
  epoch = epoch or tonumber(string.match(raw or '0 0', '^%d+ (%d+)'))
  fields[#fields + 1], fields[#fields + 2] = 'replicas', int(tracked) .. ' ' .. int(epoch)
end

if rec_changed then
  fields[#fields + 1] = 'recent'
  fields[#fields + 1] = string.format('%d %d %d %s %s %d', rec.f, rec.s, rec.c, int(rec.since), int(rec.num), rec.st)
end
if #fields > 0 then
  redis.call('HSET', KEY_WINDOW, unpack(fields))
end
if relabel and not own then
  -- Started afresh within the generation, in the layout of replicas that
  -- still record: when they last counted stays.
  redis.call('HSET', KEY_WINDOW, 'width', WIDTH_S, 'buckets', int(BUCKETS), 'laid_at', laid_at)
elseif relabel or not laid then
  redis.call('HSET', KEY_WINDOW, 'width', WIDTH_S, 'buckets', int(BUCKETS))
end
hdel(KEY_WINDOW, throttled_gone)
if throttled > 0 then
  redis.call('HSET', KEY_WINDOW, 'throttled:' .. IDX_S, int(throttled),
    'throttled', int(other_throttled + throttled), 'throttled_head', int(throttled_head or IDX))
elseif throttled_head and other_throttled > 0 then
  redis.call('HSET', KEY_WINDOW, 'throttled', int(other_throttled), 'throttled_head', int(throttled_head))
elseif throttled_head then
  -- The last throttled request has left the window.
  redis.call('HDEL', KEY_WINDOW, 'throttled', 'throttled_head')
end
if moved then
  return MOD.answer(s, false, stale, R, other_calls + calls, other_failures + failures, other_slow + slow,
    other_throttled + throttled)
end
return reply(s, false, nil, 'stale', stale, 'calls', other_calls + calls, 'failures', other_failures + failures,
  'slow', other_slow + slow, 'throttled', other_throttled + throttled)
