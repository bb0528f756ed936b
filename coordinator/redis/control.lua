-- control.lua: the operator's commands of coordinator.Controller. Runs
-- after lib.lua.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-7 see lib.lua; 8 command (isolate, release, disable, enable),
--   9 note by, 10 note reason, 11 note for ms (isolate; 0 = until released),
--   12 the reason of the transition the command makes
-- Reply: see reply in lib.lua, then stale: 0 (nothing is stale).
local COMMAND = ARGV[8]
local NOTE_BY = ARGV[9]
local NOTE_REASON = ARGV[10]
local NOTE_FOR = tonumber(ARGV[11])
local REASON = ARGV[12]

if COMMAND ~= 'isolate' and COMMAND ~= 'release' and COMMAND ~= 'disable' and COMMAND ~= 'enable' then
  return redis.error_reply('unknown command ' .. COMMAND)
end

-- An isolation that ended is released first; reply publishes both
-- transitions.
local s = begin(stored(STATE_FIELDS))

local function note()
  redis.call('HSET', KEY_STATE, 'note_by', NOTE_BY, 'note_reason', NOTE_REASON,
    'note_for', int(NOTE_FOR), 'noted_at', int(NOW))
end

local from, ended = s.state, s.open_until
if COMMAND == 'isolate' then
  local till = 0
  if NOTE_FOR > 0 then
    till = NOW + NOTE_FOR
  end
  if from ~= ISOLATED then
    restart(s, ISOLATED, {opened_at = NOW, open_until = till})
  else
    -- Isolating again replaces the end and the note only.
    s.open_until = till
    save(s, false)
  end
  note()
elseif COMMAND == 'release' then
  if from ~= CLOSED then
    close(s)
  end
elseif COMMAND == 'disable' then
  if from ~= DISABLED then
    restart(s, DISABLED)
  end
  note()
elseif from == DISABLED then -- enable
  s.state = CLOSED
  -- Kept for a window from now, as after a recovery: past every bucket
  -- counted while disabled.
  s.expires_at = keep()
  save(s, false)
  forget_note()
end

local tr = false
-- Isolating again with another end is a transition of its own, in the
-- same generation, so that every replica hears the new end.
if s.state ~= from or (COMMAND == 'isolate' and s.open_until ~= ended) then
  tr = transition(s, from, REASON)
end
return reply(s, tr, nil, 'stale', 0)
