-- snapshot.lua: Snapshot. Runs after lib.lua; reads, never writes: looking
-- never gives birth and never uses up a probe.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-3 see lib.lua
-- Reply: see reply in lib.lua, then calls, failures, slow, consecutive
--   failures, opened at, open until (0 = none), probes in flight, probe
--   successes, note by, note reason, note for ms, noted at (0 = no note),
--   then the last trip: at (0 = none), reason, generation, calls,
--   failures, slow; then the window's throttled requests; the number of
--   outliers, then four values each, by replica: replica, since, until,
--   reason; then four values per policy Records carried within the last window (of the
--   layout the window was written with, else of the caller's), newest
--   first: fingerprint, at ms, source, encoding.

local s = stored()
-- A scope that is not born, or whose isolation has ended, reads all zero:
-- the next operation that writes gives it a new generation.
if not born(s) or isolation_over(s) then
  return reply({state = CLOSED, generation = 0}, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, '', '', 0, 0,
    0, '', 0, 0, 0, 0, 0, 0)
end
local w = window(s)
local inflight = 0
for _, d in ipairs(redis.call('HVALS', KEY_PROBES)) do
  if tonumber(d) > NOW then
    inflight = inflight + 1
  end
end
local policies = {}
for _, p in ipairs(seen_policies(NOW - w.width * w.buckets)) do
  policies[#policies + 1] = p.fingerprint
  policies[#policies + 1] = p.at
  policies[#policies + 1] = p.source
  policies[#policies + 1] = p.encoding
end
local found, codec = {}, replicas_module().codec()
for id, raw in pairs(w.replicas) do
  local e = codec.parse(id, raw)
  if e.till ~= 0 and not codec.dead(e, NOW, w.width, w.buckets) then
    found[#found + 1] = e
  end
end
table.sort(found, function(a, b) return codec.before(a.id, b.id) end)
local outliers = {#found}
for _, e in ipairs(found) do
  for _, value in ipairs({e.id, e.since, e.till, e.reason}) do
    outliers[#outliers + 1] = value
  end
end
for _, p in ipairs(policies) do
  outliers[#outliers + 1] = p
end
local v = redis.call('HMGET', KEY_STATE, 'note_by', 'note_reason', 'note_for', 'noted_at',
  'trip_at', 'trip_reason', 'trip_generation', 'trip_calls', 'trip_failures', 'trip_slow')
return reply(s, false, nil,
  w.current.calls + w.others.calls, w.current.failures + w.others.failures, w.current.slow + w.others.slow,
  s.consecutive_failures, s.opened_at, s.open_until, inflight, s.probe_successes,
  v[1] or '', v[2] or '', tonumber(v[3] or 0), tonumber(v[4] or 0),
  tonumber(v[5] or 0), v[6] or '', tonumber(v[7] or 0), tonumber(v[8] or 0), tonumber(v[9] or 0), tonumber(v[10] or 0),
  w.throttled, unpack(outliers))
