-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: breaker_trip expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: breaker_trip expects 1 ARGV (cool_down_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: breaker_trip expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local FLOW = KEYS[1]
-- (end of the generated shape)
-- Trips a queue's fleet circuit breaker (docs/redis-layout.md, "Circuit
-- breakers"): no consumer reserves until `breaker_until`, then one takes the probe
-- (flow.lua). Never shortens an open breaker; a probe's slot is freed (the probe failed, or
-- fresh failures elsewhere make it moot), so the next probe goes after this cool-down.
-- The cool-down is kept (`breaker_cool_ms`): a failed probe opens the breaker for as long
-- again (breaker_judge.lua). Closing is one command: HDEL <flow> breaker_until
-- breaker_probe breaker_cool_ms.
-- ARGV: cool_down_ms. Returns breaker_until (ms, Redis's clock).
local until_ms = now_ms() + math.max(0, tonumber(ARGV[1]))
redis.call('HSET', FLOW, 'breaker_cool_ms', math.max(0, tonumber(ARGV[1])))
local current = tonumber(redis.call('HGET', FLOW, 'breaker_until'))
if current and current > until_ms then
  until_ms = current
else
  redis.call('HSET', FLOW, 'breaker_until', until_ms)
end
redis.call('HDEL', FLOW, 'breaker_probe')
return until_ms
