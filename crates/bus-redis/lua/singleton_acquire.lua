-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: singleton_acquire expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: singleton_acquire expects 2 ARGV (holder, ttl_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: singleton_acquire expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local SINGLETON = KEYS[1]
-- (end of the generated shape)
-- Takes a singleton processor's lease, or extends it if this holder already has it.
-- SINGLETON lease (keys::singleton); ARGV[1] holder token, ARGV[2] ttl in ms.
-- Returns 1 when the holder has the lease for ttl from now, 0 when another holds it.
if redis.call('SET', SINGLETON, ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', SINGLETON) == ARGV[1] then
  redis.call('PEXPIRE', SINGLETON, ARGV[2])
  return 1
end
return 0
