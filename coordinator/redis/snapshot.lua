-- snapshot.lua: Snapshot. Runs after lib.lua; reads, never writes: looking
-- never gives birth and never uses up a probe.
--
-- KEYS: state, window, probes, transitions, policy (see lib.lua)
-- ARGV: 1-3 see lib.lua
-- Reply: see reply in lib.lua; then, of a scope that is born, calls,
--   failures, slow, consecutive_failures, opened_at, open_until (0 =
--   none), probes_in_flight, probe_successes; the operator's note:
--   note_by, note_reason, note_for (ms), noted_at (0 = no note); the last
--   trip: trip_at (0 = none), trip_reason, trip_generation, trip_calls,
--   trip_failures, trip_slow; throttled, the window's throttled requests;
--   would_reject, the calls dry runs would have rejected in the
--   generation; outliers, a list of the outlying replicas in order, each {replica,
--   since, until, reason} as name/value pairs; policies, a list of the
--   policies Records carried within the last window (of the layout the
--   window was written with, else of the caller's), newest first, each
--   {fingerprint, at (ms), source, encoding} likewise.

local s = stored(STATE_FIELDS)
-- A scope that is not born, or whose isolation has ended, reads all zero:
-- the next operation that writes gives it a new generation.
if not born(s) or isolation_over(s) then
  return reply({state = CLOSED, generation = 0}, false, 0)
end
local w = window(s)
local inflight = 0
for _, d in ipairs(redis.call('HVALS', KEY_PROBES)) do
  if tonumber(d) > NOW then
    inflight = inflight + 1
  end
end
local found, codec = {}, replicas_module().codec()
for id, raw in pairs(w.replicas) do
  local e = codec.parse(id, raw)
  if e.till ~= 0 and not codec.dead(e, NOW, w.width, w.buckets) then
    found[#found + 1] = e
  end
end
table.sort(found, function(a, b) return codec.before(a.id, b.id) end)
local outliers, policies = {}, {}
for _, e in ipairs(found) do
  outliers[#outliers + 1] = {'replica', e.id, 'since', e.since, 'until', e.till, 'reason', e.reason}
end
for _, p in ipairs(seen_policies(NOW - w.width * w.buckets)) do
  policies[#policies + 1] = {'fingerprint', p.fingerprint, 'at', p.at, 'source', p.source, 'encoding', p.encoding}
end
local v = redis.call('HMGET', KEY_STATE, 'note_by', 'note_reason', 'note_for', 'noted_at',
  'trip_at', 'trip_reason', 'trip_generation', 'trip_calls', 'trip_failures', 'trip_slow', 'would_reject')
local out = {
  'calls', w.current.calls + w.others.calls, 'failures', w.current.failures + w.others.failures,
  'slow', w.current.slow + w.others.slow, 'consecutive_failures', s.consecutive_failures,
  'opened_at', s.opened_at, 'open_until', s.open_until, 'probes_in_flight', inflight,
  'probe_successes', s.probe_successes,
  'note_by', v[1] or '', 'note_reason', v[2] or '', 'note_for', tonumber(v[3] or 0), 'noted_at', tonumber(v[4] or 0),
  'trip_at', tonumber(v[5] or 0), 'trip_reason', v[6] or '', 'trip_generation', tonumber(v[7] or 0),
  'trip_calls', tonumber(v[8] or 0), 'trip_failures', tonumber(v[9] or 0), 'trip_slow', tonumber(v[10] or 0),
  'throttled', w.throttled, 'would_reject', tonumber(v[11] or 0), 'outliers', outliers, 'policies', policies}
return reply(s, false, nil, unpack(out))
