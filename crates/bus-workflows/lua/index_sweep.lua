-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: index_sweep expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: index_sweep expects 2 ARGV (limit, every_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: index_sweep expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local OPEN = KEYS[1]
-- (end of the generated shape)
-- Up to `limit` open batches due for a sweep (OPEN: batch id -> when to look next, ms),
-- each then due again `every_ms` later, so that sweepers in several processes share the
-- batches instead of all looking at the same ones.
local now = tonumber(redis.call('TIME')[1]) * 1000
local due = redis.call('ZRANGEBYSCORE', OPEN, '-inf', now, 'LIMIT', 0, ARGV[1])
for _, id in ipairs(due) do
  redis.call('ZADD', OPEN, now + tonumber(ARGV[2]), id)
end
return due
