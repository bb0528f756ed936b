-- lib.lua: shared by every script: its arguments, the clock, and the
-- answer. scripts.go assembles each script from its parts: a line naming
-- the publish command (PUBLISH, or SPUBLISH on a Redis Cluster), this
-- file, and read.lua (reading a scope) and, in the scripts that write,
-- write.lua (changing it), so that every operation stays a single
-- EVALSHA.
--
-- KEYS (every script; one hash tag, so one cluster slot): 1 state,
--   2 window, 3 probes, 4 transitions (the scope's channel, not a key),
--   5 policy. What each key and hash field holds is described once, in
--   docs/architecture.md ("Redis key layout").
-- ARGV (every script): 1 now ms ('' = the server's TIME), 2 bucket width ms,
--   3 buckets. Scripts that write add 4 the readable scope, 5 the GC
--   margin ms, 6 the highest generation of the scope the caller has seen
--   (decimal, 0 = none: the request's Seen) and 7 the ramp after a
--   recovery, ms (Policy.RampFor; 0 = none); each script's own ARGV
--   follow, from 8 on.

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
-- implement.IsolationEnded
local ENDED = 'isolation ended'
-- The operator's note, kept while isolated or disabled.
local NOTE_FIELDS = {'note_by', 'note_reason', 'note_for', 'noted_at'}

if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local IDX = math.floor(NOW / WIDTH) -- the current bucket
-- implement.Credible: a generation seen further ahead of the clock than
-- implement.SeenAhead (a day) was never handed out, and counts for nothing.
local SEEN_AHEAD = 86400000
if SEEN and SEEN > (NOW + SEEN_AHEAD) * 1000 then
  SEEN = 0
end

-- Lua numbers are doubles; %d keeps integers below 2^53 exact (generations
-- are about 1.9e15) and never writes them in scientific notation, as
-- tostring would past 14 digits.
local function int(n)
  return string.format('%d', n)
end

-- stored_int reads raw, what one of the scope's hashes (named hash) keeps
-- in field (false when it has none: nil), as the integer the scripts
-- wrote there. Junk fails the script, naming the field, and the caller
-- reports the scope as corrupt (coordinator.ErrCorruptState), where the
-- reply would otherwise go wrong: a number past 2^53, which a double does
-- not hold exactly and a reply turns into another integer, or no number,
-- which ends a reply early.
local MAX_INT = 9007199254740992 -- 2^53
local function stored_int(hash, field, raw)
  if not raw then
    return nil
  end
  local n = tonumber(raw)
  if not (n and string.match(raw, '^%-?%d+$') and n <= MAX_INT and n >= -MAX_INT) then
    error(string.format('%s hash field %s holds %q, not an integer', hash, field, string.sub(raw, 1, 64)))
  end
  return n
end

-- born: the state is there, and not closed past keeping.
local function born(s)
  return s and not (s.state == CLOSED and s.expires_at <= NOW)
end

-- lapsed is the transition begin made before the script's own work.
local lapsed = false

-- publish announces tr on the scope's channel, so that every replica
-- learns of it without asking:
-- "from to generation at open_until reason", states as coordinator.State.
-- The state keeps the message as moved, for cause.lua to announce again
-- with the span that recorded it, and drops the cause of the state left.
local function publish(tr)
  local message = string.format('%d %d %s %s %s %s', CODE[tr.from], CODE[tr.to],
    int(tr.generation), int(NOW), int(tr.open_until), tr.reason)
  redis.call(PUBLISH, CHANNEL, message)
  redis.call('HSET', KEY_STATE, 'moved', message)
  redis.call('HDEL', KEY_STATE, 'cause')
end

-- reply builds the reply of every script, and publishes what the script
-- did: first the lapse begin made, then tr, the script's own transition
-- (false: none). The reply is name/value pairs, which the Go side reads
-- by name (reply.go):
--   state (as of now), generation, now,
-- then, when tr or the lapse moved the breaker (tr reported first),
--   moved_from, moved_to, moved_generation, moved_until (the open
--   period's or isolation's end), moved_reason,
-- then the script's own names and values (...), then retry_after (ms),
-- ramp_left (ms) and policy_version, each only when it is not 0, and
-- cause, when one is kept and the state is neither closed nor disabled
-- or a ramp is left: the most frequent reply, a calm Admit's, is then the
-- shortest.
-- The ramp left is what remains of the ramp after a recovery while
-- closed (RAMP_FOR; 0 when none).
-- The policy version is that of the scope's override (0: none), so that
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
  local version = stored_int('policy', 'version', redis.call('HGET', KEY_POLICY, 'version')) or 0
  local r
  if tr then
    r = {'state', CODE[state], 'generation', s.generation, 'now', NOW, 'moved_from', CODE[tr.from],
      'moved_to', CODE[tr.to], 'moved_generation', tr.generation, 'moved_until', tr.open_until,
      'moved_reason', tr.reason, ...}
  else
    r = {'state', CODE[state], 'generation', s.generation, 'now', NOW, ...}
  end
  if retry ~= 0 then
    r[#r + 1], r[#r + 2] = 'retry_after', retry
  end
  if ramp ~= 0 then
    r[#r + 1], r[#r + 2] = 'ramp_left', ramp
  end
  if version ~= 0 then
    r[#r + 1], r[#r + 2] = 'policy_version', version
  end
  -- The cause of the state (cause.lua), where a rejection or a ramp links
  -- to it: never on a calm scope's answer, and never more than a
  -- traceparent's 55 bytes, whatever the hash was given (the Go side
  -- checks the rest, coordinator.CheckCause).
  if (state ~= CLOSED and state ~= DISABLED) or ramp ~= 0 then
    local cause = redis.call('HGET', KEY_STATE, 'cause')
    if cause and #cause == 55 then
      r[#r + 1], r[#r + 2] = 'cause', cause
    end
  end
  return r
end
