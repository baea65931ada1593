-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: seal expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 2 then error({ err = 'ERR bus: seal expects at least 2 ARGV (ttl_ms, chunks), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: seal expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local META, DATA = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Marks an attachment complete: writes its meta hash with the same expiry as its data.
-- An attachment without a meta hash is incomplete and never read.
-- META meta hash, DATA data list; ARGV[1] TTL in milliseconds;
-- ARGV[2] number of chunks expected; ARGV[3..] field, value pairs.
local chunks = tonumber(ARGV[2])
if chunks > 0 and redis.call('LLEN', DATA) ~= chunks then
  return redis.error_reply('attachment chunks missing (expired?)')
end
redis.call('DEL', META)
redis.call('HSET', META, unpack(ARGV, 3))
redis.call('PEXPIRE', META, ARGV[1])
if chunks > 0 then
  redis.call('PEXPIRE', DATA, ARGV[1])
end
return 1
