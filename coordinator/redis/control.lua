-- control.lua: the operator's commands of coordinator.Controller. Runs
-- after lib.lua.
--
-- KEYS: 1 state, 2 window, 3 leases, 4 batches, 5 channel (see lib.lua)
-- ARGV: 1 now ms or '', 2 bucket width ms, 3 buckets, 4 fresh generation,
--   5 scope, 6 GC margin ms, 7 command (isolate, release, disable, enable),
--   8 note by, 9 note reason, 10 note for ms (isolate; 0 = until
--   released), 11 the reason of the transition the command makes
-- Reply: see result in lib.lua.

local s = load(true)
-- An isolation that ended is released first; both transitions go out.
local ended = false
if isolation_over(s) then
  close(s)
  ended = {ISOLATED, CLOSED, s.g, ENDED}
end

local function note()
  redis.call('HSET', KS, 'nb', ARGV[8], 'nr', ARGV[9], 'nf', ARGV[10], 'na', int(NOW))
end

local cmd = ARGV[7]
local from = s.st
if cmd == 'isolate' then
  local till = 0
  if tonumber(ARGV[10]) > 0 then
    till = NOW + tonumber(ARGV[10])
  end
  if from ~= ISOLATED then
    restart(s, ISOLATED, {oa = NOW, ou = till})
  else
    -- Isolating again replaces the end and the note only.
    s.ou = till
    save(s, false)
  end
  note()
elseif cmd == 'release' then
  if from ~= CLOSED then
    close(s)
  end
elseif cmd == 'disable' then
  if from ~= DISABLED then
    restart(s, DISABLED)
  end
  note()
elseif cmd == 'enable' then
  if from == DISABLED then
    s.st = CLOSED
    -- Kept for a window from now, as after a recovery: past every bucket
    -- counted while disabled.
    s.exp = (IDX + NB) * WIDTH
    save(s, false)
    redis.call('HDEL', KS, 'nb', 'nr', 'nf', 'na')
  end
else
  return redis.error_reply('unknown command ' .. cmd)
end

local tr = ended
if s.st ~= from then
  if ended then
    publish(ended)
  end
  tr = {from, s.st, s.g, ARGV[11]}
end
return result(s, 0, tr)
