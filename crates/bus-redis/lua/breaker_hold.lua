-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: breaker_hold expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: breaker_hold expects 1 ARGV (lock_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: breaker_hold expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local FLOW = KEYS[1]
-- (end of the generated shape)
-- Holds a running probe's slot of a queue's fleet circuit breaker
-- (docs/redis-layout.md, "Circuit breakers") for one more lock timeout: called by the
-- probe's host each time it renews the probe's lock, so that no second probe starts beside
-- a long one. Nothing when no slot is held (a trip freed it, or the breaker closed).
-- ARGV: lock_ms. Returns 1 if the slot was extended, else 0.
if redis.call('HEXISTS', FLOW, 'breaker_probe') == 0 then return 0 end
redis.call('HSET', FLOW, 'breaker_probe', now_ms() + tonumber(ARGV[1]))
return 1
