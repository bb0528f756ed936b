-- snapshot.lua: Snapshot. Runs after lib.lua; reads, never writes: looking
-- never uses up a probe.
--
-- KEYS: 1 state, 2 window, 3 leases, 4 batches, 5 channel (see lib.lua)
-- ARGV: 1 now ms or '', 2 bucket width ms, 3 buckets
-- Reply: {state as of now, stored state, generation, calls, failures, slow,
--   consecutive failures, opened at, open until (0 = none), probes in
--   flight, probe successes, note by, note reason, note for ms, noted at
--   (0 = no note)}

local s = load(false)
if s.fresh then
  return {CLOSED, CLOSED, s.g, 0, 0, 0, 0, 0, 0, 0, 0, '', '', 0, 0}
end
if isolation_over(s) then
  -- As the release will leave it.
  return {CLOSED, CLOSED, gen_now(s), 0, 0, 0, 0, s.oa, 0, 0, 0, '', '', 0, 0}
end
local calls, failures, slow = 0, 0, 0
local label, fields = window()
if label == int(s.g) then
  for _, f in ipairs(fields) do
    if live(f[1]) then
      local c, fl, sl = parse_bucket(f[2])
      calls, failures, slow = calls + c, failures + fl, slow + sl
    end
  end
end
local inflight = 0
for _, d in ipairs(redis.call('HVALS', KP)) do
  if tonumber(d) > NOW then
    inflight = inflight + 1
  end
end
local note = redis.call('HMGET', KS, 'nb', 'nr', 'nf', 'na')
return {state_now(s), s.st, s.g, calls, failures, slow, s.cf, s.oa, s.ou, inflight, s.ps,
  note[1] or '', note[2] or '', tonumber(note[3] or 0), tonumber(note[4] or 0)}
