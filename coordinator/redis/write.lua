-- write.lua: the helpers of the scripts that write, after lib.lua and
-- read.lua (see scripts.go).

-- HDEL in chunks: unpack of a long list would overflow Lua's C stack.
local function hdel(key, fields)
  for i = 1, #fields, 500 do
    redis.call('HDEL', key, unpack(fields, i, math.min(i + 499, #fields)))
  end
end

-- keep is when a closed generation written now may be forgotten: once
-- every bucket it could write has left the window.
local function keep()
  return (IDX + BUCKETS) * WIDTH
end

-- next_generation is implement.NextGeneration: above prev, and above
-- every generation minted before now on a clock that has not gone back.
local function next_generation(prev)
  local g = math.max(prev + 1, NOW * 1000)
  -- implement.MaxGeneration, 2^53 - 1: past it a double no longer holds
  -- prev + 1, and the generation would stick. The scope is refused as
  -- corrupt instead.
  if g > 9007199254740991 then
    error(string.format('state hash field generation holds %d: no generation can follow it', prev))
  end
  return g
end

-- save writes the whole state (encode_state, state.lua, and the batch IDs
-- once Record changed them) and gives the keys their lifetime. relabel
-- starts the window afresh, labelled with the generation.
--
-- Closed state is kept until expires_at, and its keys' lifetime is garbage
-- collection only: decisions compare expires_at with now. So the lifetime
-- is set a window beyond expires_at (gc_until), and set again only once
-- expires_at has caught up with it, or when a key may lack it (a new
-- window, s.gc_until false): once a window, not on every Record. State and
-- window expire together.
local function save(s, relabel)
  local lifetime = false
  if s.state == CLOSED then
    if relabel or not s.gc_until or s.gc_until < s.expires_at then
      s.gc_until = s.expires_at + WIDTH * BUCKETS
      lifetime = true
    end
  else
    s.gc_until = 0
  end
  if s.batches_changed then
    redis.call('HSET', KEY_STATE, encode_state(s, 'batches', s.batches, 'batch_count', int(s.batch_count)))
  else
    redis.call('HSET', KEY_STATE, encode_state(s))
  end
  if relabel then
    redis.call('DEL', KEY_WINDOW)
    redis.call('HSET', KEY_WINDOW, 'generation', int(s.generation))
  end
  if lifetime then
    local ms = int(s.gc_until - NOW + GC_MARGIN)
    redis.call('PEXPIRE', KEY_STATE, ms)
    redis.call('PEXPIRE', KEY_WINDOW, ms)
  elseif s.state ~= CLOSED then
    -- Open, half-open and manual states never expire: losing them would
    -- admit everything, or undo an operator.
    redis.call('PERSIST', KEY_STATE)
    redis.call('PERSIST', KEY_WINDOW)
  end
end

-- restart moves the breaker to state in a new generation: an empty window,
-- no probe leases, no open period; fields then set what the new state
-- needs. Every transition but open -> half-open and an operator's enable
-- goes through it, and so does a birth.
local function restart(s, state, fields)
  s.state = state
  s.generation = next_generation(s.generation)
  s.open_for, s.open_until, s.consecutive_failures, s.probe_successes, s.recovered_at = 0, 0, 0, 0, 0
  s.consecutive_stalls = 0
  for k, v in pairs(fields or {}) do
    s[k] = v
  end
  save(s, true)
  redis.call('DEL', KEY_PROBES)
  redis.call('HDEL', KEY_STATE, 'pushable_generation', 'would_reject')
end

-- open starts an open period of period ms. by_rules_from, when given, is
-- the generation the rules opened it from (a trip, a failed probe): a
-- pushback answered to a call of it may still set the period (push.lua).
local function open(s, period, by_rules_from)
  -- failing_since: when the breaker last left closed, kept while it
  -- reopens (Policy.BackoffAfter).
  if s.state == CLOSED then
    s.failing_since = NOW
  end
  restart(s, OPEN, {opened_at = NOW, open_for = period, open_until = NOW + period})
  if by_rules_from then
    redis.call('HSET', KEY_STATE, 'pushable_generation', int(by_rules_from))
  end
end

-- tripped notes why and when s just opened by its rules, and the window's
-- counts then (zero for a failed probe): Snapshot.LastTrip.
local function tripped(s, reason, calls, failures, slow)
  redis.call('HSET', KEY_STATE, 'trip_at', int(NOW), 'trip_reason', reason, 'trip_generation', int(s.generation),
    'trip_calls', int(calls), 'trip_failures', int(failures), 'trip_slow', int(slow))
end

local function forget_note()
  redis.call('HDEL', KEY_STATE, unpack(NOTE_FIELDS))
end

-- close starts a closed generation, kept for a window so that calls
-- admitted under it can still be recorded. Closing after open, half-open
-- or isolated is a recovery, which starts the ramp.
local function close(s)
  local recovered = 0
  if s.state ~= DISABLED then
    recovered = NOW
  end
  restart(s, CLOSED, {expires_at = keep(), recovered_at = recovered, failing_since = 0})
  forget_note()
end

-- reopen_for is the open period after a failed probe, the last period
-- being last and the failing having begun at since: open_for until
-- backoff_after ms have passed, then twice the last, up to max_open_for
-- (0: no back-off).
local function reopen_for(open_for, max_open_for, backoff_after, last, since)
  if max_open_for == 0 or NOW - since < backoff_after then
    return open_for
  end
  return math.min(math.max(last, open_for) * 2, max_open_for)
end

-- birth gives the scope its first generation above prev, the highest
-- generation its surviving data knows: closed, nothing counted, no lease,
-- no batch ID remembered.
local function birth(prev)
  redis.call('DEL', KEY_STATE)
  redis.call('HSET', KEY_STATE, 'scope', SCOPE)
  local s = {generation = prev, opened_at = 0}
  restart(s, CLOSED, {expires_at = keep()})
  s.newborn = true
  return s
end

-- transition describes the move of s from state from, just made.
local function transition(s, from, reason)
  local open_until = 0
  if s.state == OPEN or s.state == ISOLATED then
    open_until = s.open_until
  end
  return {from = from, to = s.state, generation = s.generation, open_until = open_until, reason = reason}
end

-- begin takes the scope as stored read it, for a script that writes. A
-- scope that is not born is born; its floor is the generation of its
-- expired state or, when the state hash is lost, the label of the
-- surviving window (0 if none). So is a scope whose generation lies below
-- the one the caller has seen: its state was lost (rolled back by a
-- failover), and its floor is what the caller saw. An isolation whose time
-- has passed ends (lazily, like an open period).
local function begin(s)
  if not born(s) or s.generation < SEEN then
    if s then
      return birth(math.max(s.generation, SEEN))
    end
    return birth(math.max(stored_int('window', 'generation', redis.call('HGET', KEY_WINDOW, 'generation')) or 0, SEEN))
  end
  if isolation_over(s) then
    close(s)
    lapsed = transition(s, ISOLATED, ENDED)
  end
  return s
end
