-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 8 then error({ err = 'ERR bus: batch_done expects 8 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: batch_done expects 1 ARGV (retention_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_done expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, DONE, SETTLING, DEAD, RESULTS, ADDS, DEFER, CALLBACKS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
-- (end of the generated shape)
-- Marks a batch done once its parent's member was settled: its keys expire after
-- `retention_ms`. Returns 1, or 0 when the batch does not exist.
if redis.call('EXISTS', BATCH) == 0 then
  return 0
end
redis.call('HSET', BATCH, 'state', 'done')
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[1])
end
return 1
