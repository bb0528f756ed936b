-- state.lua: the breaker's fields in the state hash, and the functions that
-- turn them into a state and back. Written by TestStateLuaIsStateFields
-- (go test -run TestStateLuaIsStateFields -update-lua) from stateFields in
-- state_test.go; do not edit by hand. After lib.lua, before read.lua.
-- Field by field, not a loop over the list: a loop costs a calm Record more
-- (bench/RESULTS.md).

local STATE_FIELDS = {'state', 'generation', 'opened_at', 'open_for', 'open_until', 'consecutive_failures', 'consecutive_stalls', 'probe_successes', 'expires_at', 'gc_until', 'recovered_at', 'failing_since'}
local RECORD_FIELDS = {'state', 'generation', 'opened_at', 'open_for', 'open_until', 'consecutive_failures', 'consecutive_stalls', 'probe_successes', 'expires_at', 'gc_until', 'recovered_at', 'failing_since', 'batches', 'batch_count', 'reporters'}

local function decode_state(v)
  return {
    state = v[1],
    generation = stored_int('state', 'generation', v[2]),
    opened_at = stored_int('state', 'opened_at', v[3]),
    open_for = stored_int('state', 'open_for', v[4]),
    open_until = stored_int('state', 'open_until', v[5]),
    consecutive_failures = stored_int('state', 'consecutive_failures', v[6]),
    consecutive_stalls = stored_int('state', 'consecutive_stalls', v[7]) or 0,
    probe_successes = stored_int('state', 'probe_successes', v[8]),
    expires_at = stored_int('state', 'expires_at', v[9]),
    gc_until = stored_int('state', 'gc_until', v[10]) or 0,
    recovered_at = stored_int('state', 'recovered_at', v[11]) or 0,
    failing_since = stored_int('state', 'failing_since', v[12]) or 0,
    batches = v[13] or '',
    batch_count = stored_int('state', 'batch_count', v[14]) or 0,
    reporters = v[15] or false,
  }
end

local function encode_state(s, ...)
  return
    'state', s.state,
    'generation', int(s.generation),
    'opened_at', int(s.opened_at),
    'open_for', int(s.open_for),
    'open_until', int(s.open_until),
    'consecutive_failures', int(s.consecutive_failures),
    'consecutive_stalls', int((s.consecutive_stalls or 0)),
    'probe_successes', int(s.probe_successes),
    'expires_at', int(s.expires_at),
    'gc_until', int((s.gc_until or 0)),
    'recovered_at', int((s.recovered_at or 0)),
    'failing_since', int((s.failing_since or 0)),
    ...
end
