-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: batch_status expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: batch_status expects 1 ARGV (dead_limit), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_status expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, DEAD, DEFER = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- A batch as operators see it (read only): {the batch hash as field/value pairs, up to
-- `dead_limit` dead records (index, json pairs), the members waiting for a child batch
-- (index, child pairs)}; {} when the batch does not exist.
local fields = redis.call('HGETALL', BATCH)
if #fields == 0 then
  return {}
end
local limit = tonumber(ARGV[1])
local dead = {}
local cursor = '0'
repeat
  local scan = redis.call('HSCAN', DEAD, cursor, 'COUNT', 100)
  cursor = scan[1]
  for j = 1, #scan[2], 2 do
    if #dead >= 2 * limit then
      break
    end
    dead[#dead + 1] = scan[2][j]
    dead[#dead + 1] = scan[2][j + 1]
  end
until cursor == '0' or #dead >= 2 * limit
local waiting = {}
local defer = redis.call('HGETALL', DEFER)
for j = 1, #defer, 2 do
  if not string.find(defer[j], ':', 1, true) then
    waiting[#waiting + 1] = defer[j]
    waiting[#waiting + 1] = defer[j + 1]
  end
end
return { fields, dead, waiting }
