-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: batch_defer expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: batch_defer expects 2 ARGV (index, child), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_defer expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, DONE, DEFER = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Records that member `index` opened the child batch `child`: it settles only once that
-- batch handed off (batch_settle's `child`) and its own ack is confirmed. Returns 1, 0 when
-- the member had settled already, -1 when the batch does not exist.
if redis.call('EXISTS', BATCH) == 0 then
  return -1
end
if redis.call('GETBIT', DONE, ARGV[1]) == 1 then
  return 0
end
redis.call('HSETNX', DEFER, ARGV[1], ARGV[2])
return 1
