-- lib.lua: shared by every script; the Go side prepends it to each one, so
-- each operation stays a single EVALSHA.
--
-- KEYS (every script): 1 state hash, 2 window hash, 3 probe leases hash,
--   4 recent batch IDs list, 5 the transition channel (not a key). All
--   share one hash tag: one cluster slot.
-- PUBLISH is defined before this file by the Go side: 'SPUBLISH' (sharded,
-- on a Redis Cluster) or 'PUBLISH'.
-- ARGV (every script): 1 now in ms ('' = the server's TIME), 2 bucket width
--   in ms, 3 buckets. Writing scripts add: 4 a fresh random generation
--   (1..2^44) for lost state, 5 the readable scope, 6 the GC margin in ms.
--
-- State hash fields: st (0 closed, 1 open, 2 half-open, 3 isolated,
-- 4 disabled), g generation, oa opened (or isolated) at, of current open
-- period, ou open until (isolated: its end, 0 = until released), cf
-- consecutive failures, ps probe successes, exp (closed only) when every
-- bucket the generation wrote has left the window, scope (for operators);
-- while isolated or disabled the operator's note: nb by, nr reason, nf for
-- (ms), na when.
-- Window hash: g = the generation its buckets belong to, x = exp of the
-- state (0 while open or half-open), and one field per
-- bucket index holding "calls failures slow". It lives exactly as long as
-- the state hash, so that a state hash lost on its own can be noticed.
-- Leases hash: claim -> deadline in ms; a deadline, never a key TTL.

local KS, KW, KP, KB, KT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local CLOSED, OPEN, HALF, ISOLATED, DISABLED = 0, 1, 2, 3, 4
-- coordinator.IsolationEnded
local ENDED = 'isolation ended'

-- Lua numbers are doubles; %d keeps integers below 2^53 exact and never
-- writes them in scientific notation (tostring would past 14 digits).
local function int(n)
  return string.format('%d', n)
end

local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local NOW = clock(ARGV[1])
local WIDTH = tonumber(ARGV[2])
local NB = tonumber(ARGV[3])
local IDX = math.floor(NOW / WIDTH)

-- HDEL in chunks: unpack of a long list would overflow Lua's C stack.
local function hdel(key, fields)
  for i = 1, #fields, 500 do
    redis.call('HDEL', key, unpack(fields, i, math.min(i + 499, #fields)))
  end
end

local function live(bi)
  return bi > IDX - NB and bi <= IDX
end

local function parse_bucket(v)
  local c, f, s = string.match(v, '^(%d+) (%d+) (%d+)$')
  return tonumber(c), tonumber(f), tonumber(s)
end

-- window reads the window hash: its generation label, the raw fields.
local function window()
  local raw = redis.call('HGETALL', KW)
  local label = false
  local fields = {}
  for i = 1, #raw, 2 do
    if raw[i] == 'g' then
      label = raw[i + 1]
    elseif raw[i] ~= 'x' then
      fields[#fields + 1] = {tonumber(raw[i]), raw[i + 1], raw[i]}
    end
  end
  return label, fields
end

local function fresh(g)
  return {st = CLOSED, g = g, oa = 0, of = 0, ou = 0, cf = 0, ps = 0, exp = 0, fresh = true}
end

local function ttl(s)
  return s.exp - NOW + tonumber(ARGV[6])
end

-- save writes the whole state. A fresh state replaces whatever the scope's
-- keys held before (an expired generation's leftovers). remark starts the
-- window afresh, labelled with the generation: the window key outlives no
-- state and is never deleted while the state lives, so a window key without
-- a state hash is the sign of lost state.
local function save(s, remark)
  if s.fresh then
    redis.call('DEL', KW, KP, KB)
    redis.call('HSET', KS, 'scope', ARGV[5])
    s.fresh = false
    remark = true
  end
  redis.call('HSET', KS, 'st', s.st, 'g', int(s.g), 'oa', int(s.oa), 'of', int(s.of),
    'ou', int(s.ou), 'cf', s.cf, 'ps', s.ps, 'exp', int(s.exp))
  -- x: when this state stops mattering (0: never), so that a window key
  -- found without its state tells a loss from a scope that had nothing to
  -- lose.
  local x = 0
  if s.st == CLOSED then
    x = int(s.exp)
  end
  if remark then
    redis.call('DEL', KW)
    redis.call('HSET', KW, 'g', int(s.g), 'x', x)
  else
    redis.call('HSET', KW, 'x', x)
  end
  if s.st == CLOSED then
    -- Garbage collection only: decisions use exp. State, window and batch
    -- IDs expire together, after every bucket the generation labels.
    local ms = ttl(s)
    redis.call('PEXPIRE', KS, ms)
    redis.call('PEXPIRE', KW, ms)
    redis.call('PEXPIRE', KB, ms)
  else
    -- Open and half-open state never expires: losing it would admit
    -- everything.
    redis.call('PERSIST', KS)
    redis.call('PERSIST', KW)
    redis.call('PERSIST', KB)
  end
end

-- load reads the scope's state as of NOW. A closed state whose window has
-- run out reads as a fresh scope (generation 0). A missing state hash
-- beside the window key of a state that still mattered is lost state
-- (eviction, a deleted key): it restarts
-- closed in a random generation that no surviving bucket and no outcome in
-- flight carries, persisted when write is true (a read-only caller sees
-- generation 0 and no counts).
local function load(write)
  local v = redis.call('HMGET', KS, 'st', 'g', 'oa', 'of', 'ou', 'cf', 'ps', 'exp')
  if v[1] then
    local s = {st = tonumber(v[1]), g = tonumber(v[2]), oa = tonumber(v[3]), of = tonumber(v[4]),
      ou = tonumber(v[5]), cf = tonumber(v[6]), ps = tonumber(v[7]), exp = tonumber(v[8])}
    if s.st == CLOSED and s.exp <= NOW then
      return fresh(0)
    end
    return s
  end
  if not write then
    return fresh(0)
  end
  local x = redis.call('HGET', KW, 'x')
  if not x or (tonumber(x) ~= 0 and tonumber(x) <= NOW) then
    return fresh(0)
  end
  local g = tonumber(ARGV[4])
  if int(g) == redis.call('HGET', KW, 'g') then
    g = g + 1
  end
  local s = fresh(g)
  s.exp = (IDX + NB) * WIDTH
  save(s)
  return s
end

-- isolation_over: isolated for a set time that has passed; the next Admit
-- or operator's command releases it.
local function isolation_over(s)
  return s.st == ISOLATED and s.ou ~= 0 and NOW >= s.ou
end

-- state_now is the state as of NOW: an open breaker whose period ended
-- reads half-open, an isolation that ended closed, without changing
-- anything.
local function state_now(s)
  if s.st == OPEN and NOW >= s.ou then
    return HALF
  end
  if isolation_over(s) then
    return CLOSED
  end
  return s.st
end

-- gen_now is the generation as of NOW: an isolation that ended reads as
-- the generation its release starts.
local function gen_now(s)
  if isolation_over(s) then
    return s.g + 1
  end
  return s.g
end

-- restart moves the breaker to state st in a new generation: an empty
-- window, no probe leases, no open period; fields then set what the new
-- state needs. Every transition but open -> half-open and an operator's
-- enable goes through it.
local function restart(s, st, fields)
  s.st = st
  s.g = s.g + 1
  s.of, s.ou, s.cf, s.ps = 0, 0, 0, 0
  for k, v in pairs(fields or {}) do
    s[k] = v
  end
  save(s, true)
  redis.call('DEL', KP)
end

-- open starts an open period in a new generation; the old window and every
-- probe lease belong to the old one.
local function open(s, period)
  restart(s, OPEN, {oa = NOW, of = period, ou = NOW + period})
end

-- close starts a closed generation with an empty window: after enough
-- probe successes, or when an operator's isolation or disabling ends.
local function close(s)
  -- Keep the new generation for a window, so that calls admitted under it
  -- can still be recorded.
  restart(s, CLOSED, {exp = (IDX + NB) * WIDTH})
  redis.call('HDEL', KS, 'nb', 'nr', 'nf', 'na')
end

-- publish announces a transition {from, to, generation, reason} on the
-- scope's channel, so that every replica learns of it without asking:
-- "from to generation at reason".
local function publish(tr)
  redis.call(PUBLISH, KT, string.format('%d %d %s %s %s', tr[1], tr[2], int(tr[3]), int(NOW), tr[4]))
end

-- result is the reply of Record and Settle, and publishes the transition
-- they made, if any:
-- {state as of now, generation, stale, now, from, to, generation after, reason}
-- with from = -1 when nothing moved.
local function result(s, stale, tr)
  if tr then
    publish(tr)
    return {state_now(s), gen_now(s), stale, NOW, tr[1], tr[2], tr[3], tr[4]}
  end
  return {state_now(s), gen_now(s), stale, NOW, -1, -1, 0, ''}
end
