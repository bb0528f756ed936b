-- read.lua: reading a scope: its state hash, its window, the policies
-- Records carried. After lib.lua in every script (see scripts.go).

-- stored reads the state hash; false when there is none. It reads fields
-- (state.lua: STATE_FIELDS, the breaker's, or for Record RECORD_FIELDS,
-- also batches, batch_count and reporters) through decode_state.
local function stored(fields)
  local v = redis.call('HMGET', KEY_STATE, unpack(fields))
  if not v[1] then
    return false
  end
  if not CODE[v[1]] then
    error('state hash holds unknown state ' .. v[1])
  end
  return decode_state(v)
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
-- and buckets, the layout; replicas, the raw fields of its replicas by
-- ID (replicas.lua). A window that stores no layout (written
-- before layouts were, or with nothing counted) is read with the
-- caller's, WIDTH and BUCKETS.
local REPLICA_PREFIX = 'replica:' -- the window's fields of replicas (replicas.lua)

local function window(s)
  local w = {current = counts(), others = counts(), dead = {}, labelled = false, throttled = 0,
    width = WIDTH, buckets = BUCKETS, replicas = {}}
  local raw = redis.call('HGETALL', KEY_WINDOW)
  for i = 1, #raw, 2 do
    if raw[i] == 'width' or raw[i] == 'buckets' then
      w[raw[i]] = stored_int('window', raw[i], raw[i + 1])
    end
  end
  local current = math.floor(NOW / w.width)
  for i = 1, #raw, 2 do
    local idx = tonumber(raw[i])
    if not idx then
      local t = throttled_index(raw[i])
      if raw[i] == 'generation' then
        w.labelled = raw[i + 1] == int(s.generation)
      elseif string.sub(raw[i], 1, #REPLICA_PREFIX) == REPLICA_PREFIX then
        w.replicas[string.sub(raw[i], #REPLICA_PREFIX + 1)] = raw[i + 1]
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
      width = WIDTH, buckets = BUCKETS, replicas = {}}
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
