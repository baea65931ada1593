-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: run_list expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: run_list expects 2 ARGV (limit, outcome_prefix), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: run_list expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DUE, RUNS = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Up to `limit` parked runs, soonest first (read only): {token, due ms, record, whether
-- its wait has an outcome (0/1), ...}.
local due = redis.call('ZRANGE', DUE, 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #due, 2 do
  local token = due[i]
  out[#out + 1] = token
  out[#out + 1] = due[i + 1]
  out[#out + 1] = redis.call('HGET', RUNS, token) or ''
  out[#out + 1] = redis.call('EXISTS', ARGV[2] .. token)
end
return out
