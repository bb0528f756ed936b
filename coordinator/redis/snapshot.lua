-- snapshot.lua: Snapshot. Runs after lib.lua; reads, never writes: looking
-- never gives birth and never uses up a probe.
--
-- KEYS: state, window, probes, batches, transitions (see lib.lua)
-- ARGV: 1-3 see lib.lua
-- Reply: see reply in lib.lua, then calls, failures, slow, consecutive
--   failures, opened at, open until (0 = none), probes in flight, probe
--   successes, note by, note reason, note for ms, noted at (0 = no note).

local s = stored()
-- A scope that is not born, or whose isolation has ended, reads all zero:
-- the next operation that writes gives it a new generation.
if not born(s) or isolation_over(s) then
  return reply({state = CLOSED, generation = 0}, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, '', '', 0, 0)
end
local w = window(s)
local inflight = 0
for _, d in ipairs(redis.call('HVALS', KEY_PROBES)) do
  if tonumber(d) > NOW then
    inflight = inflight + 1
  end
end
local note = redis.call('HMGET', KEY_STATE, unpack(NOTE_FIELDS))
return reply(s, false, nil,
  w.current.calls + w.others.calls, w.current.failures + w.others.failures, w.current.slow + w.others.slow,
  s.consecutive_failures, s.opened_at, s.open_until, inflight, s.probe_successes,
  note[1] or '', note[2] or '', tonumber(note[3] or 0), tonumber(note[4] or 0))
