-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: index_done expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: index_done expects 2 ARGV (batch, retention_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: index_done expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local OPEN, RECENT = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Moves a batch from the open ones (OPEN) to the recently done ones (RECENT: id -> when,
-- ms), and forgets done ones older than `retention_ms`.
local now = tonumber(redis.call('TIME')[1]) * 1000
redis.call('ZREM', OPEN, ARGV[1])
redis.call('ZADD', RECENT, now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', RECENT, '-inf', now - tonumber(ARGV[2]))
return 1
