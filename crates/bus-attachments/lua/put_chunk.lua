-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: put_chunk expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: put_chunk expects 3 ARGV (chunk, index, ttl_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2, 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: put_chunk expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DATA = KEYS[1]
-- (end of the generated shape)
-- Appends chunk number ARGV[2] (0-based) of an attachment and (re)sets the data list's
-- expiry in the same step, so that no chunk is ever stored without its backstop TTL.
-- Safe to run twice (a client re-sends a script in flight when its connection dropped):
-- the chunk is appended only when the list holds exactly the chunks before it.
-- DATA data list; ARGV[1] chunk bytes; ARGV[2] its index; ARGV[3] TTL in milliseconds.
local index = tonumber(ARGV[2])
local len = redis.call('LLEN', DATA)
if len == index then
  redis.call('RPUSH', DATA, ARGV[1])
elseif len ~= index + 1 then
  return redis.error_reply('attachment chunk ' .. index .. ' out of order: ' .. len .. ' stored (expired?)')
end
redis.call('PEXPIRE', DATA, ARGV[3])
return 1
