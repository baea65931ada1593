-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: run_park expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 4 then error({ err = 'ERR bus: run_park expects 4 ARGV (token, due_ms, record, envelope), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: run_park expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DUE, RUNS, ENVS = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Parks a sleeping run until `due_ms` unless its token is parked (then changes nothing):
-- RUNS[token] = its record (JSON: q, id, type), ENVS[token] = the envelope to send when it
-- is due, DUE[token] = the due time. Returns 1 when it parked it, else 0.
if redis.call('HEXISTS', RUNS, ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', RUNS, ARGV[1], ARGV[3])
redis.call('HSET', ENVS, ARGV[1], ARGV[4])
redis.call('ZADD', DUE, ARGV[2], ARGV[1])
return 1
