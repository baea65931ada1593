-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 5 then error({ err = 'ERR bus: run_wait expects 5 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 6 then error({ err = 'ERR bus: run_wait expects 6 ARGV (token, due_ms, record, envelope, outcome_prefix, keep_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2, 6 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: run_wait expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DUE, RUNS, ENVS, SIGNAL, WAITERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- (end of the generated shape)
-- Parks a run waiting for a signal (its record's `w`) until `due_ms`, its timeout, unless
-- its token is parked. When the signal was sent already (SIGNAL holds its payload), the
-- wait's outcome is the payload (`<outcome prefix><token>` = 's' .. payload, kept
-- `keep_ms`) and the run is due at once; else the token joins the signal's WAITERS.
-- Returns 0 (parked already), 1 (waiting) or 2 (signalled already).
if redis.call('HEXISTS', RUNS, ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', RUNS, ARGV[1], ARGV[3])
redis.call('HSET', ENVS, ARGV[1], ARGV[4])
local payload = redis.call('GET', SIGNAL)
if payload then
  local t = redis.call('TIME')
  redis.call('SET', ARGV[5] .. ARGV[1], 's' .. payload, 'PX', ARGV[6])
  redis.call('ZADD', DUE, tonumber(t[1]) * 1000, ARGV[1])
  return 2
end
redis.call('SADD', WAITERS, ARGV[1])
redis.call('ZADD', DUE, ARGV[2], ARGV[1])
return 1
