-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 2 then error({ err = 'ERR bus: touch expects at least 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: touch expects 1 ARGV (ttl_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: touch expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local META, DATA = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Sets a new expiry on a complete attachment (and its refs hash, if shared); 0 when it
-- is gone.
-- META meta hash, DATA data list[, KEYS[3] refs hash: optional, as before it existed];
-- ARGV[1] TTL in milliseconds.
if redis.call('PEXPIRE', META, ARGV[1]) == 0 then
  return 0
end
redis.call('PEXPIRE', DATA, ARGV[1])
if KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
end
return 1
