-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: batch_results expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: batch_results expects 2 ARGV (from, count), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_results expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, DONE, RESULTS, DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- Members `from` .. `from + count - 1` (read only; count at most 1000, and none past the
-- last member): per member {settled (0/1), result or false, dead record or false}.
local total = tonumber(redis.call('HGET', BATCH, 'total') or -1)
if total < 0 then
  return -1
end
local from, count = tonumber(ARGV[1]), math.min(tonumber(ARGV[2]), 1000)
local out = {}
for i = from, math.min(from + count, total) - 1 do
  out[#out + 1] = redis.call('GETBIT', DONE, i)
  out[#out + 1] = redis.call('HGET', RESULTS, i)
  out[#out + 1] = redis.call('HGET', DEAD, i)
end
return out
