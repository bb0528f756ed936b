-- replicas.lua: the replicas of a scope (Policy.Outliers): how its window
-- keeps them, and the rules that judge the fleet without its most failing
-- replicas and find outliers. After read.lua, for Record and Snapshot.
--
-- Window hash fields, of the window's generation like its buckets:
--   replica:<id>  a replica that failed or was slow: "<own> <run> <epoch>
--                 <until> <period> <since> <n>" then n times " <index>
--                 <calls> <failures> <slow>" (its own buckets, in the
--                 window's layout), then " <calls> <failures> <slow>
--                 <number>" (what it added to the fleet's recent excursion
--                 number, record.lua), then "|" and the reason it is an
--                 outlier; own is its own run of failures, run what it
--                 added to the fleet's run number epoch, until (0: no
--                 outlier) the end of its period, period that period,
--                 since when its spell began
--   replicas      "<tracked> <epoch>": how many replica: fields there are,
--                 and the number of the fleet's run of failures (a
--                 success that ends a run starts the next)
--
-- State hash field, which outlives generations: the replicas that record
-- do not change with the breaker's state.
--   reporters     "|" then "<at>:<id>|" per replica heard last, with the
--                 start of the bucket of its last Record (ms)
--
-- A replica's ID holds no "|": the Go side escapes one that does, as "~"
-- and its bytes in hex (replica.go).

-- Everything here is made by replicas_module, which a script calls only
-- when it needs it: a Lua closure costs about 300 instructions for every
-- local of the script it captures, so a Record of a healthy scope, which
-- needs none of this, pays for none of it.
local function replicas_module()
  local mod = {}

  -- percent writes thousandths as a percentage: 500 is "50%", 125 "12.5%".
  local function percent(pm)
    if pm % 10 == 0 then
      return string.format('%d%%', pm / 10)
    end
    return string.format('%d.%d%%', math.floor(pm / 10), pm % 10)
  end

  -- stalled_of is what a reason says of the stalled calls among the n
  -- failures it counted: st of them, at most n (the replicas a rule leaves
  -- out take their failures with them, and maybe stalls).
  local function stalled_of(st, n)
    if not st or st <= 0 then
      return ''
    end
    return string.format(', %d stalled', math.min(st, n))
  end

  -- reason_of says why rule ('run', 'failures' or 'slow') holds with n of
  -- of, under the thresholds of c; suffix follows. A fleet's trip says how
  -- many of its failures were stalled: st, the run's (c.stalled.run) or
  -- the recent excursion's (c.rec.st); an outlier's reason passes none.
  function mod.reason_of(c, rule, n, of, suffix, st)
    if rule == 'run' then
      return string.format('consecutive failures %d >= %d', n, c.CONSECUTIVE_FAILURES) ..
        stalled_of(st, n) .. suffix
    elseif rule == 'failures' then
      return string.format('failures %d/%d >= %s', n, of, percent(c.FAILURE_PERMILLE)) .. suffix
    elseif rule == 'recent' then
      return string.format('recent failures %d/%d, %d over %s', n, of,
        math.floor((1000 * n - c.FAILURE_PERMILLE * of) / 1000), percent(c.FAILURE_PERMILLE)) ..
        stalled_of(st, n) .. suffix
    elseif rule == 'recent_slow' then
      return string.format('recent slow calls %d/%d, %d over %s', n, of,
        math.floor((1000 * n - c.SLOW_PERMILLE * of) / 1000), percent(c.SLOW_PERMILLE)) .. suffix
    end
    return string.format('slow calls %d/%d >= %s', n, of, percent(c.SLOW_PERMILLE)) .. suffix
  end

  -- stalls is what c counts of stalled calls for a fleet's trip by rule.
  function mod.stalls(c, rule)
    if rule == 'run' then
      return c.stalled.run
    elseif rule == 'recent' then
      return c.rec.st
    end
    return 0
  end

  -- reporters reads a reporters field (false: none) as a list of {id,
  -- at}, at the start of the bucket of each one's last Record.
  function mod.reporters(raw)
    local list = {}
    for at, id in string.gmatch(raw or '', '|(%d+):([^|]*)') do
      list[#list + 1] = {id = id, at = tonumber(at)}
    end
    return list
  end

  -- field writes a reporters field of list.
  function mod.field(list)
    local parts = {'|'}
    for _, rp in ipairs(list) do
      parts[#parts + 1] = int(rp.at) .. ':' .. rp.id .. '|'
    end
    return table.concat(parts)
  end

  -- answer is the Record's reply when its replica is an outlier or moved
  -- (r: what the rules say of it), which reply in lib.lua makes.
  -- Besides the plain Record's (record.lua), it names the outlier
  -- (outlier_since, outlier_until, outlier_reason) and the replica's own
  -- transition (own_from, own_to, own_until, own_reason) when there is
  -- one; c nil: the Record counted nothing, or left the breaker not
  -- closed.
  function mod.answer(s, tr, stale, r, c, f, sl, thr)
    local v = {'stale', stale}
    if c then
      for _, x in ipairs({'calls', c, 'failures', f, 'slow', sl, 'throttled', thr}) do
        v[#v + 1] = x
      end
    end
    if r.x and r.x.till ~= 0 then
      for _, x in ipairs({'outlier_since', r.x.since, 'outlier_until', r.x.till, 'outlier_reason', r.x.reason}) do
        v[#v + 1] = x
      end
    end
    if r.own_tr then
      for _, x in ipairs({'own_from', CODE[r.own_tr.from], 'own_to', CODE[r.own_tr.to],
          'own_until', r.own_tr.open_until, 'own_reason', r.own_tr.reason}) do
        v[#v + 1] = x
      end
    end
    return reply(s, tr, nil, unpack(v))
  end

  -- replica_codec makes the helpers that read and write the fields above.
  local function new_codec()
    local codec = {}

    -- parse reads a replica: field of replica id; nil when there is none.
    function codec.parse(id, raw)
      if not raw then
        return nil
      end
      local bar = string.find(raw, '|', 1, true)
      local nums = {}
      for n in string.gmatch(string.sub(raw, 1, bar - 1), '%d+') do
        nums[#nums + 1] = tonumber(n)
      end
      local e = {id = id, own = nums[1], run = nums[2], epoch = nums[3], till = nums[4], period = nums[5],
        since = nums[6], reason = string.sub(raw, bar + 1), buckets = {}}
      for i = 8, 7 + 4 * nums[7], 4 do
        e.buckets[nums[i]] = {nums[i + 1], nums[i + 2], nums[i + 3]}
      end
      local k = 8 + 4 * nums[7]
      e.rn, e.rf, e.rs, e.rnum = nums[k] or 0, nums[k + 1] or 0, nums[k + 2] or 0, nums[k + 3] or 0
      return e
    end

    -- encode writes e as parse reads it.
    function codec.encode(e)
      local parts = {int(e.own), int(e.run), int(e.epoch), int(e.till), int(e.period), int(e.since), ''}
      local n = 0
      for idx, b in pairs(e.buckets) do
        n = n + 1
        parts[#parts + 1] = string.format('%s %d %d %d', int(idx), b[1], b[2], b[3])
      end
      parts[7] = int(n)
      parts[#parts + 1] = string.format('%d %d %d %s', e.rn, e.rf, e.rs, int(e.rnum))
      return table.concat(parts, ' ') .. '|' .. e.reason
    end

    -- counts sums e's buckets from bucket index from on.
    function codec.counts(e, from)
      local c, f, sl = 0, 0, 0
      for idx, b in pairs(e.buckets) do
        if idx >= from then
          c, f, sl = c + b[1], f + b[2], sl + b[3]
        end
      end
      return c, f, sl
    end

    -- dead: e is worth nothing any more at now in a window of width x
    -- buckets: an outlier a window past its period (the replica is gone),
    -- or a replica with no live bucket.
    function codec.dead(e, now, width, buckets)
      if e.till ~= 0 then
        return now >= e.till + width * buckets
      end
      local from = math.floor(now / width) - buckets + 1
      for idx in pairs(e.buckets) do
        if idx >= from then
          return false
        end
      end
      return true
    end

    -- before orders replica IDs byte by byte, as Go compares strings (Lua's
    -- < follows the server's locale), escaped ones as the Go side gave them.
    function codec.before(a, b)
      local function plain(id)
        if string.sub(id, 1, 1) ~= '~' then
          return id
        end
        return (string.gsub(string.sub(id, 2), '%x%x', function(h) return string.char(tonumber(h, 16)) end))
      end
      a, b = plain(a), plain(b)
      for i = 1, math.min(#a, #b) do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then
          return x < y
        end
      end
      return #a < #b
    end

    return codec
  end
  mod.codec = new_codec

  -- replica_rules makes the rules of one Record of replica c.REPLICA. c holds
  -- the Record's constants (NOW, IDX, FROM the first live bucket, WIDTH,
  -- BUCKETS, the policy's thresholds, KEY_WINDOW), reporters (the list of
  -- {id, at} the Record has heard) and relaid (the window's fields to write
  -- after its save, by name), and parse (a bucket's counts). R, what it
  -- returns, holds the replica's entry x (nil while it has none), its own
  -- transition own_tr (false: none), tracked, and whether to write x
  -- (x_changed) and the reporters (heard_changed).
  function mod.rules(c)
    local codec = new_codec()
    -- entries: every entry by ID once loaded, x among them; dropped, the
    -- fields of the entries to delete; rewrite, the entries to write besides
    -- x.
    local loaded, entries = false, {}
    local R = {codec = codec, x = nil, x_changed = false, own_tr = false, tracked = c.tracked, heard_changed = false,
      entries = entries, dropped = {}, rewrite = {}}
    local FROM = c.FROM

    local function drop(id)
      R.dropped[#R.dropped + 1] = REPLICA_PREFIX .. id
    end

    -- own takes the replica's stored entry, judged in the layout it was
    -- written with; a dead one is dropped.
    function R.own(raw, width, buckets)
      R.owned = true
      R.x = codec.parse(c.REPLICA, raw)
      if codec.dead(R.x, c.NOW, width, buckets) then
        drop(c.REPLICA)
        R.x, R.tracked = nil, R.tracked - 1
      end
    end

    local function relaid_buckets(e, target)
      local into = {}
      for i, b in pairs(e.buckets) do
        local j = target(i)
        if j then
          local sum = into[j] or {0, 0, 0}
          into[j] = {sum[1] + b[1], sum[2] + b[2], sum[3] + b[3]}
        end
      end
      e.buckets = into
    end

    -- adopt takes every entry from raw, a window's fields, to write them
    -- again into a window started afresh: re-laid by target, if set.
    function R.adopt(raw, target)
      for k = 1, #raw, 2 do
        if string.sub(raw[k], 1, #REPLICA_PREFIX) == REPLICA_PREFIX then
          local id = string.sub(raw[k], #REPLICA_PREFIX + 1)
          -- The replica's own entry is x once taken (nil if found dead).
          local e = R.x
          if id ~= c.REPLICA or not R.owned then
            e = codec.parse(id, raw[k + 1])
          end
          -- The replica's own entry is re-laid once it is known to count
          -- (settle_own).
          if e and target and e ~= R.x then
            relaid_buckets(e, target)
          end
          if e then
            entries[id] = e
          end
        end
      end
      loaded, R.target = true, target
    end

    -- settle_own re-lays the replica's own entry like the others, now that
    -- its outcomes count: one with nothing left starts afresh.
    function R.settle_own()
      if R.x and R.target then
        relaid_buckets(R.x, R.target)
        if codec.dead(R.x, c.NOW, c.WIDTH, c.BUCKETS) then
          entries[c.REPLICA], R.x = nil, nil
        end
      end
    end

    -- load reads every entry, once, with x as this Record has it, and drops
    -- the dead.
    local function load()
      if not loaded then
        loaded = true
        if R.tracked > 0 then
          local raw = redis.call('HGETALL', c.KEY_WINDOW)
          for k = 1, #raw, 2 do
            if string.sub(raw[k], 1, #REPLICA_PREFIX) == REPLICA_PREFIX then
              local id = string.sub(raw[k], #REPLICA_PREFIX + 1)
              if id ~= c.REPLICA then
                entries[id] = codec.parse(id, raw[k + 1])
              end
            end
          end
        end
      end
      if R.x then
        entries[c.REPLICA] = R.x
      end
      local n = 0
      for id, e in pairs(entries) do
        if codec.dead(e, c.NOW, c.WIDTH, c.BUCKETS) then
          entries[id] = nil
          drop(id)
        else
          n = n + 1
        end
      end
      R.tracked = n
      return entries
    end

    local function bad(e)
      local _, f, sl = codec.counts(e, FROM)
      return f + sl
    end

    -- track gives the replica an entry, evicting, when the table is full,
    -- the entry that is no outlier with the fewest failures and slow calls
    -- (ties: the lowest ID).
    local function track()
      if R.tracked >= c.TRACKED_REPLICAS then
        load()
      end
      if R.tracked >= c.TRACKED_REPLICAS then
        local victim = false
        for _, e in pairs(entries) do
          if not victim then
            victim = e
          else
            local a, b = (e.till ~= 0) and 1 or 0, (victim.till ~= 0) and 1 or 0
            local ba, bb = bad(e), bad(victim)
            if a < b or (a == b and (ba < bb or (ba == bb and codec.before(e.id, victim.id)))) then
              victim = e
            end
          end
        end
        entries[victim.id], R.rewrite[victim.id] = nil, nil
        drop(victim.id)
        R.tracked = R.tracked - 1
      end
      R.x = {id = c.REPLICA, own = 0, run = 0, epoch = 0, till = 0, period = 0, since = 0, reason = '', buckets = {},
        rn = 0, rf = 0, rs = 0, rnum = 0}
      R.tracked = R.tracked + 1
      if loaded then
        entries[c.REPLICA] = R.x
      end
    end

    -- attribute adds n outcomes of the replica, just added to the fleet's
    -- window while the fleet's run is number epoch, to its entry: a failure
    -- or a slow call makes one if there is none.
    function R.attribute(failed, slowed, n, epoch)
      if not R.x and (failed or slowed) then
        track()
      end
      local x = R.x
      if not x then
        return
      end
      for idx in pairs(x.buckets) do
        if idx < FROM then
          x.buckets[idx] = nil
        end
      end
      local b = x.buckets[c.IDX] or {0, 0, 0}
      x.buckets[c.IDX] = b
      b[1] = b[1] + n
      if failed then
        b[2] = b[2] + n
        x.own = x.own + n
        if x.epoch ~= epoch then
          x.epoch, x.run = epoch, 0
        end
        x.run = x.run + n
      else
        x.own = 0
      end
      if slowed then
        b[3] = b[3] + n
      end
      R.x_changed = true
    end

    -- share adds k calls of the replica, counted in the fleet's recent
    -- excursion number num, to what its entry says it added there.
    function R.share(failed, slowed, k, num)
      local x = R.x
      if not x or k == 0 then
        return
      end
      if x.rnum ~= num then
        x.rn, x.rf, x.rs, x.rnum = 0, 0, 0, num
      end
      x.rn = x.rn + k
      if failed then
        x.rf = x.rf + k
      end
      if slowed then
        x.rs = x.rs + k
      end
      R.x_changed = true
    end

    -- joined: the replica has failed (or been slow) in the fleet's recent
    -- excursion, so that its successes count in it; the successes it held
    -- from before count in none, and the fleet's pace stands for them.
    function R.joined()
      return R.x and R.x.rnum == c.rec.num and R.x.rn > 0
    end

    -- recent is what e added to the fleet's current recent excursion:
    -- calls, failures, slow calls.
    local function recent(e)
      if e.rnum ~= c.rec.num then
        return 0, 0, 0
      end
      return e.rn, e.rf, e.rs
    end

    local measures = {
      failures = function(e)
        local _, f = codec.counts(e, FROM)
        return f
      end,
      slow = function(e)
        local _, _, sl = codec.counts(e, FROM)
        return sl
      end,
      recent = function(e)
        local rn, rf = recent(e)
        return 1000 * rf - c.FAILURE_PERMILLE * rn
      end,
      recent_slow = function(e)
        local rn, _, rs = recent(e)
        return 1000 * rs - c.SLOW_PERMILLE * rn
      end,
    }

    -- worst is the n replicas but the one of ID except that contribute most
    -- by measure (ties: the lowest ID), outliers and replicas that
    -- contribute nothing aside.
    local function worst(n, measure, except)
      local cands = {}
      for id, e in pairs(load()) do
        if id ~= except and e.till == 0 and measure(e) > 0 then
          cands[#cands + 1] = e
        end
      end
      table.sort(cands, function(a, b)
        local ma, mb = measure(a), measure(b)
        if ma ~= mb then
          return ma > mb
        end
        return codec.before(a.id, b.id)
      end)
      local out = {}
      for k = 1, math.min(n, #cands) do
        out[k] = cands[k]
      end
      return out
    end

    -- left_out is the replicas a rule is judged without: the Outliers that
    -- contribute most to it (ties: the lowest ID), unless those are all
    -- the replicas heard within the window. Outliers are no candidates:
    -- their outcomes have left the fleet's window already. epoch is the
    -- fleet's run's number.
    local function left_out(rule, epoch)
      local measure = measures[rule] or function(e)
        if e.epoch == epoch then
          return e.run
        end
        return 0
      end
      local out = worst(c.OUTLIERS, measure, false)
      if #out == 0 then
        return {}
      end
      local ids = {}
      for _, e in ipairs(out) do
        ids[e.id] = true
      end
      for _, rp in ipairs(c.reporters) do
        if math.floor(rp.at / c.WIDTH) >= FROM and not ids[rp.id] then
          return out
        end
      end
      return {}
    end

    -- broad judges rule, which holds with n of of on the fleet's counts
    -- (a run: n alone), without the replicas left_out says: the reason it
    -- holds so, or false.
    function R.broad(rule, n, of, epoch)
      local out = left_out(rule, epoch)
      for _, e in ipairs(out) do
        local ec, ef, es = codec.counts(e, FROM)
        if rule == 'recent' or rule == 'recent_slow' then
          ec, ef, es = recent(e)
        end
        if rule == 'run' then
          if e.epoch == epoch then
            n = n - e.run
          end
        elseif rule == 'failures' or rule == 'recent' then
          n, of = n - ef, of - ec
        else
          n, of = n - es, of - ec
        end
      end
      local holds
      if rule == 'run' then
        holds = n >= c.CONSECUTIVE_FAILURES
      elseif rule == 'failures' then
        holds = of >= c.MIN_CALLS and n * 1000 >= c.FAILURE_PERMILLE * of
      elseif rule == 'recent' then
        holds = 1000 * n - c.FAILURE_PERMILLE * of >= 1000 * c.MIN_CALLS
      elseif rule == 'recent_slow' then
        holds = 1000 * n - c.SLOW_PERMILLE * of >= 1000 * c.MIN_CALLS
      else
        holds = of >= c.MIN_CALLS and n * 1000 >= c.SLOW_PERMILLE * of
      end
      if not holds then
        return false
      end
      local suffix = ''
      if #out == 1 then
        suffix = ', leaving out 1 replica'
      elseif #out > 1 then
        suffix = string.format(', leaving out %d replicas', #out)
      end
      return mod.reason_of(c, rule, n, of, suffix, mod.stalls(c, rule))
    end

    -- crossings adds to at where, within a run of n successes of the
    -- replica, the calls a ratio rule counts without the replicas it leaves
    -- out reach MinCalls: there it may first hold. calls, failures and slow
    -- are the fleet's before the run.
    function R.crossings(at, n, calls, failures, slow, epoch)
      if R.tracked == 0 then
        return
      end
      -- Only where the rule can hold on the fleet's counts at all: the
      -- ratio falls with every success.
      local all = math.max(calls + 1, c.MIN_CALLS)
      for rule, pm in pairs({failures = c.FAILURE_PERMILLE, slow = c.SLOW_PERMILLE}) do
        local worse = failures
        if rule == 'slow' then
          worse = slow
        end
        if pm > 0 and worse * 1000 >= pm * all then
          local before, mine = calls, false
          for _, e in ipairs(left_out(rule, epoch)) do
            before = before - codec.counts(e, FROM)
            mine = mine or e.id == c.REPLICA
          end
          if not mine and before + 1 < c.MIN_CALLS and before + n >= c.MIN_CALLS then
            at[#at + 1] = c.MIN_CALLS - before
          end
        end
      end
    end

    -- worse says whether the replica fails (slowed: is slow) markedly
    -- more than the rest of the fleet: c.MARKEDLY times their share or
    -- more, over the recent excursion when the rest made MinCalls calls
    -- in it (the same stretch of time for both), else over the window,
    -- whose counts are all, failed and sl_all. The rest leaves out the
    -- Outliers - 1 other replicas that contribute most, as a trip would.
    local function worse(slowed, all, failed, sl_all)
      local function shares(of, n_all, n_bad)
        local calls, mine = of(R.x)
        local rest_calls, rest = n_all - calls, n_bad - mine
        for _, e in ipairs(worst(c.OUTLIERS - 1, function(e) return select(2, of(e)) end, c.REPLICA)) do
          local ec, eb = of(e)
          rest_calls, rest = rest_calls - ec, rest - eb
        end
        return mine, calls, rest, rest_calls
      end
      local function in_recent(e)
        local rn, rf, rs = recent(e)
        if slowed then
          return rn, rs
        end
        return rn, rf
      end
      local function in_window(e)
        local ec, ef, es = codec.counts(e, FROM)
        if slowed then
          return ec, es
        end
        return ec, ef
      end
      -- rec.over is made only when the Record counts in the excursion.
      local over = (c.rec.over and c.rec.over()) or 0
      local mine, calls, rest, rest_calls = shares(in_recent, over, slowed and c.rec.s or c.rec.f)
      if calls == 0 or rest_calls < c.MIN_CALLS then
        mine, calls, rest, rest_calls = shares(in_window, all, slowed and sl_all or failed)
      end
      return mine * rest_calls >= c.MARKEDLY * rest * calls
    end

    -- own_reason says which rule the replica's own outcomes trip while it
    -- fails (or is slow) markedly more than the rest of the fleet, whose
    -- window counts all, failed and sl_all; false when none does, or when
    -- no other replica was heard within the window: a replica alone is
    -- its own fleet.
    function R.own_reason(all, failed, sl_all)
      local alone = true
      for _, rp in ipairs(c.reporters) do
        if rp.id ~= c.REPLICA and math.floor(rp.at / c.WIDTH) >= FROM then
          alone = false
        end
      end
      if alone then
        return false
      end
      local x = R.x
      if c.CONSECUTIVE_FAILURES > 0 and x.own >= c.CONSECUTIVE_FAILURES and worse(false, all, failed, sl_all) then
        return mod.reason_of(c, 'run', x.own, 0, '')
      end
      local calls, f, sl = codec.counts(x, FROM)
      if calls < c.MIN_CALLS then
        return false
      end
      if c.FAILURE_PERMILLE > 0 and f * 1000 >= c.FAILURE_PERMILLE * calls and worse(false, all, failed, sl_all) then
        return mod.reason_of(c, 'failures', f, calls, '')
      end
      if c.SLOW_PERMILLE > 0 and sl * 1000 >= c.SLOW_PERMILLE * calls and worse(true, all, failed, sl_all) then
        return mod.reason_of(c, 'slow', sl, calls, '')
      end
      return false
    end

    -- isolate makes the replica an outlier for reason: its outcomes leave
    -- the fleet's window, whose counts (the current bucket's and the other
    -- live buckets', and the run of failures, number epoch) it takes and
    -- returns without them, and it leaves the reporters, for an open
    -- period.
    function R.isolate(reason, calls, failures, slow, other_calls, other_failures, other_slow, run, epoch)
      local x = R.x
      x.period, x.till, x.since, x.reason, R.x_changed = c.OPEN_FOR, c.NOW + c.OPEN_FOR, c.NOW, reason, true
      local fields = {}
      for idx in pairs(x.buckets) do
        if idx ~= c.IDX and idx >= FROM and not c.relaid[int(idx)] then
          fields[#fields + 1] = int(idx)
        end
      end
      if #fields > 0 then
        local v = redis.call('HMGET', c.KEY_WINDOW, unpack(fields))
        for k, field in ipairs(fields) do
          if v[k] then
            c.relaid[field] = v[k]
          end
        end
      end
      for idx, b in pairs(x.buckets) do
        if idx == c.IDX then
          calls, failures, slow = math.max(0, calls - b[1]), math.max(0, failures - b[2]), math.max(0, slow - b[3])
        elseif idx >= FROM and c.relaid[int(idx)] then
          local bc, bf, bs = c.parse(c.relaid[int(idx)])
          local nc, nf, ns = math.max(0, bc - b[1]), math.max(0, bf - b[2]), math.max(0, bs - b[3])
          other_calls, other_failures, other_slow = other_calls - (bc - nc), other_failures - (bf - nf), other_slow - (bs - ns)
          c.relaid[int(idx)] = string.format('%d %d %d', nc, nf, ns)
        end
      end
      if x.epoch == epoch then
        run = math.max(0, run - x.run)
      end
      x.run = 0
      local rn, rf, rs = recent(x)
      c.rec.c, c.rec.f, c.rec.s = c.rec.c - rn, c.rec.f - rf, c.rec.s - rs
      x.rn, x.rf, x.rs = 0, 0, 0
      -- Never more than Outliers at once: the spells that began first end
      -- (ties: the lowest ID). An outlier is silent while its period lasts,
      -- so one whose replica is gone (restarted under a new ID) cannot be
      -- told from one that waits: the newest evidence wins.
      local spells = {}
      for id, e in pairs(load()) do
        if id ~= c.REPLICA and e.till ~= 0 then
          spells[#spells + 1] = e
        end
      end
      table.sort(spells, function(a, b)
        if a.since ~= b.since then
          return a.since < b.since
        end
        return codec.before(a.id, b.id)
      end)
      for k = 1, #spells - c.OUTLIERS + 1 do
        local id = spells[k].id
        entries[id], R.rewrite[id] = nil, nil
        drop(id)
        R.tracked = R.tracked - 1
      end
      for k = #c.reporters, 1, -1 do
        if c.reporters[k].id == c.REPLICA then
          table.remove(c.reporters, k)
          R.heard_changed = true
        end
      end
      R.own_tr = {from = 'closed', to = 'open', open_until = x.till, reason = reason}
      return calls, failures, slow, other_calls, other_failures, other_slow, run
    end

    -- probe settles the outlier's probe: failed, another period, as the
    -- fleet's breaker reopens (reopen_for in write.lua, from the spell's
    -- start); else the end of its spell, a replica like any other again,
    -- tracked afresh.
    function R.probe(failed)
      local x = R.x
      if failed then
        local period = c.reopen_for(c.OPEN_FOR, c.MAX_OPEN_FOR, c.BACKOFF_AFTER, x.period, x.since)
        x.period, x.till, x.reason = period, c.NOW + period, 'probe failed'
        R.own_tr = {from = 'half-open', to = 'open', open_until = x.till, reason = x.reason}
        return
      end
      R.own_tr = {from = 'half-open', to = 'closed', open_until = 0, reason = 'probe succeeded'}
      drop(c.REPLICA)
      R.x, R.tracked = nil, R.tracked - 1
      entries[c.REPLICA] = nil
    end

    -- found: the replica was found an outlier by this Record (the rest of
    -- its outcomes are stale).
    function R.found()
      return R.own_tr and R.own_tr.to == 'open'
    end

    -- fields returns the window's fields to write for the replicas, after
    -- a save; afresh: the window started afresh, and every entry goes in
    -- again.
    function R.fields(afresh)
      local out = {}
      if afresh then
        local n = 0
        for id, e in pairs(entries) do
          if (id ~= c.REPLICA or not R.x) and not codec.dead(e, c.NOW, c.WIDTH, c.BUCKETS) then
            R.rewrite[id], n = e, n + 1
          end
        end
        R.tracked = n + ((R.x and 1) or 0)
      end
      for id, e in pairs(R.rewrite) do
        out[#out + 1], out[#out + 2] = REPLICA_PREFIX .. id, codec.encode(e)
      end
      if R.x and (R.x_changed or afresh) then
        out[#out + 1], out[#out + 2] = REPLICA_PREFIX .. c.REPLICA, codec.encode(R.x)
      end
      return out
    end

    return R
  end

  return mod
end
