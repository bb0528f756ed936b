-- lib.lua: shared by every script: reading a scope and answering. The Go
-- side prepends it, after a line naming the publish command (PUBLISH, or
-- SPUBLISH on a Redis Cluster), to each script, so that every operation
-- stays a single EVALSHA; write.lua, the helpers that change a scope,
-- follows it in the scripts that write (scripts.go).
--
-- KEYS (every script; one hash tag, so one cluster slot):
--   1 state        hash: the breaker (fields below)
--   2 window       hash: field generation labels the buckets; head, calls,
--                  failures, slow: running totals of the live buckets, up
--                  to bucket head; throttled:<index>, the requests callers
--                  throttled in a bucket, with throttled and throttled_head
--                  their running total (only once some were counted);
--                  width and buckets, the layout the buckets were written
--                  with (bucket width ms, bucket count; see window);
--                  every other field is a bucket, named by its index
--                  (start ms / width), holding "calls failures slow"
--   3 probes       hash: probe leases, claim -> deadline ms
--   4 transitions  the scope's pub/sub channel (not a key)
--   5 policy       hash: the scope's policy override (policy.lua); every
--                  reply carries its version
-- ARGV (every script): 1 now ms ('' = the server's TIME), 2 bucket width ms,
--   3 buckets. Scripts that write add 4 the readable scope, 5 the GC
--   margin ms, 6 the highest generation of the scope the caller has seen
--   (decimal, 0 = none: coordinator.WithSeen) and 7 the ramp after a
--   recovery, ms (Policy.RampFor; 0 = none); each script's own ARGV
--   follow, from 8 on.
--
-- State hash fields: state (closed, open, half-open, isolated, disabled),
-- generation, opened_at (when it last opened or was isolated), open_for
-- (the current open period), open_until (end of the open period or of an
-- isolation; 0 = none, or isolated until released), consecutive_failures,
-- probe_successes, expires_at (closed: when every bucket its generation can
-- write has left the window), gc_until (closed: the keys' lifetime ends a
-- GC margin after it; 0 otherwise), recovered_at (closed after open,
-- half-open or isolated: when, the start of the ramp; 0 otherwise), scope (the readable scope, for operators),
-- while isolated or disabled the operator's note: note_by, note_reason,
-- note_for (ms), noted_at; batches, the IDs of the last batches Record
-- counted, each followed by a NUL byte, and batch_count, how many; and
-- once it has opened by its rules, the last
-- trip: trip_at, trip_reason, trip_generation, trip_calls, trip_failures,
-- trip_slow; and per policy Records carried, policy:<fingerprint> =
-- "<ms> <source> <encoding>" (see seen_policies). Times are Unix ms of the
-- coordinator's clock.
--
-- The window key lives as long as the state hash and carries the
-- generation of its buckets, so that a state hash lost on its own leaves
-- the floor for the next generation behind.

local KEY_STATE, KEY_WINDOW, KEY_PROBES, CHANNEL, KEY_POLICY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local NOW = tonumber(ARGV[1]) -- nil: the server's TIME, read below
local WIDTH = tonumber(ARGV[2])
local BUCKETS = tonumber(ARGV[3])
local SCOPE = ARGV[4]
local GC_MARGIN = tonumber(ARGV[5])
local SEEN = tonumber(ARGV[6])
local RAMP_FOR = tonumber(ARGV[7]) or 0

local CLOSED, OPEN, HALF_OPEN, ISOLATED, DISABLED = 'closed', 'open', 'half-open', 'isolated', 'disabled'
-- coordinator.State, as replies and the feed carry it
local CODE = {closed = 0, open = 1, ['half-open'] = 2, isolated = 3, disabled = 4}
-- coordinator.IsolationEnded
local ENDED = 'isolation ended'
-- The operator's note, kept while isolated or disabled.
local NOTE_FIELDS = {'note_by', 'note_reason', 'note_for', 'noted_at'}

if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local IDX = math.floor(NOW / WIDTH) -- the current bucket

-- Lua numbers are doubles; %d keeps integers below 2^53 exact (generations
-- are about 1.9e15) and never writes them in scientific notation, as
-- tostring would past 14 digits.
local function int(n)
  return string.format('%d', n)
end

-- WITH_BATCHES: stored also reads the batch IDs (Record sets it).
local WITH_BATCHES = false

-- stored reads the state hash; false when there is none.
local function stored()
  local v
  if WITH_BATCHES then
    v = redis.call('HMGET', KEY_STATE, 'state', 'generation', 'opened_at', 'open_for',
      'open_until', 'consecutive_failures', 'probe_successes', 'expires_at', 'gc_until', 'recovered_at', 'batches', 'batch_count')
  else
    v = redis.call('HMGET', KEY_STATE, 'state', 'generation', 'opened_at', 'open_for',
      'open_until', 'consecutive_failures', 'probe_successes', 'expires_at', 'gc_until', 'recovered_at')
  end
  if not v[1] then
    return false
  end
  if not CODE[v[1]] then
    error('state hash holds unknown state ' .. v[1])
  end
  return {state = v[1], generation = tonumber(v[2]), opened_at = tonumber(v[3]),
    open_for = tonumber(v[4]), open_until = tonumber(v[5]), consecutive_failures = tonumber(v[6]),
    probe_successes = tonumber(v[7]), expires_at = tonumber(v[8]), gc_until = tonumber(v[9] or 0),
    recovered_at = tonumber(v[10] or 0), batches = v[11] or '', batch_count = tonumber(v[12] or 0)}
end

-- born: the state is there, and not closed past keeping.
local function born(s)
  return s and not (s.state == CLOSED and s.expires_at <= NOW)
end

-- isolation_over: isolated for a set time that has passed.
local function isolation_over(s)
  return s.state == ISOLATED and s.open_until ~= 0 and NOW >= s.open_until
end

local function counts()
  return {calls = 0, failures = 0, slow = 0}
end

-- throttled_index is the bucket index of a field throttled:<index>; nil
-- for any other field.
local function throttled_index(field)
  return tonumber(string.match(field, '^throttled:(%d+)$'))
end

-- window reads the window of s's generation with the layout it was
-- written with: the counts of the current bucket and of the other live
-- buckets, the fields of buckets that have left it, and whether it is
-- labelled with s's generation at all (if not, its buckets count for
-- nothing); throttled, the throttled requests of the live buckets; width
-- and buckets, the layout. A window that stores no layout (written
-- before layouts were, or with nothing counted) is read with the
-- caller's, WIDTH and BUCKETS.
local function window(s)
  local w = {current = counts(), others = counts(), dead = {}, labelled = false, throttled = 0,
    width = WIDTH, buckets = BUCKETS}
  local raw = redis.call('HGETALL', KEY_WINDOW)
  for i = 1, #raw, 2 do
    if raw[i] == 'width' then
      w.width = tonumber(raw[i + 1])
    elseif raw[i] == 'buckets' then
      w.buckets = tonumber(raw[i + 1])
    end
  end
  local current = math.floor(NOW / w.width)
  for i = 1, #raw, 2 do
    local idx = tonumber(raw[i])
    if not idx then
      local t = throttled_index(raw[i])
      if raw[i] == 'generation' then
        w.labelled = raw[i + 1] == int(s.generation)
      elseif t and t > current - w.buckets and t <= current then
        w.throttled = w.throttled + tonumber(raw[i + 1])
      end
    elseif idx <= current - w.buckets then
      w.dead[#w.dead + 1] = raw[i]
    elseif idx <= current then
      local c, f, sl = string.match(raw[i + 1], '^(%d+) (%d+) (%d+)$')
      local b = w.others
      if idx == current then
        b = w.current
      end
      b.calls, b.failures, b.slow = b.calls + tonumber(c), b.failures + tonumber(f), b.slow + tonumber(sl)
    end
  end
  if not w.labelled then
    return {current = counts(), others = counts(), dead = {}, labelled = false, throttled = 0,
      width = WIDTH, buckets = BUCKETS}
  end
  return w
end

-- seen_policies reads the policies Records carried (Snapshot.Policies),
-- kept in the state hash as policy:<fingerprint> = "<ms> <source>
-- <encoding>": those carried after since (ms), newest first, ties broken
-- by fingerprint, each {fingerprint, at, source, encoding}; and the
-- fields of the others.
local function seen_policies(since)
  local live, old = {}, {}
  local raw = redis.call('HGETALL', KEY_STATE)
  for i = 1, #raw, 2 do
    local fingerprint = string.match(raw[i], '^policy:(.*)$')
    if fingerprint then
      local at, source, encoding = string.match(raw[i + 1], '^(%d+) (%d+) (.*)$')
      at = tonumber(at)
      if at > since then
        live[#live + 1] = {fingerprint = fingerprint, at = at, source = tonumber(source), encoding = encoding}
      else
        old[#old + 1] = raw[i]
      end
    end
  end
  table.sort(live, function(a, b)
    if a.at ~= b.at then
      return a.at > b.at
    end
    return a.fingerprint < b.fingerprint
  end)
  return live, old
end

-- lapsed is the transition begin made before the script's own work.
local lapsed = false

-- publish announces tr on the scope's channel, so that every replica
-- learns of it without asking:
-- "from to generation at open_until reason", states as coordinator.State.
local function publish(tr)
  redis.call(PUBLISH, CHANNEL, string.format('%d %d %s %s %s %s', CODE[tr.from], CODE[tr.to],
    int(tr.generation), int(NOW), int(tr.open_until), tr.reason))
end

-- reply builds the reply of every script, and publishes what the script
-- did: first the lapse begin made, then tr, the script's own transition
-- (false: none). It reports tr, or else the lapse:
--   {state as of now, generation, retry after ms, now,
--    from, to, generation after, open until, reason, ramp left ms,
--    policy version, ...}
-- with from = -1 when nothing moved, then the script's own values (...).
-- The ramp left is what remains of the ramp after a recovery while
-- closed (RAMP_FOR; 0 when none).
-- The policy version is that of the scope's override ('0': none), so that
-- a caller learns of a change on its next round trip.
-- retry nil: until the open period, or an isolation for a set time, ends
-- (0 in any other state). The state as of now reads an open breaker whose
-- period has ended as half-open.
local function reply(s, tr, retry, ...)
  if lapsed then
    publish(lapsed)
  end
  if tr then
    publish(tr)
  else
    tr = lapsed
  end
  local state = s.state
  if not retry then
    retry = 0
    if (state == OPEN or state == ISOLATED) and s.open_until > NOW then
      retry = s.open_until - NOW
    end
  end
  if state == OPEN and NOW >= s.open_until then
    state = HALF_OPEN
  end
  local ramp = 0
  if state == CLOSED and RAMP_FOR > 0 and (s.recovered_at or 0) > 0 and NOW < s.recovered_at + RAMP_FOR then
    ramp = s.recovered_at + RAMP_FOR - NOW
  end
  local version = tonumber(redis.call('HGET', KEY_POLICY, 'version') or 0)
  if tr then
    return {CODE[state], s.generation, retry, NOW,
      CODE[tr.from], CODE[tr.to], tr.generation, tr.open_until, tr.reason, ramp, version, ...}
  end
  return {CODE[state], s.generation, retry, NOW, -1, -1, 0, 0, '', ramp, version, ...}
end
