-- Trips a queue's fleet circuit breaker (protocol 4; docs/redis-layout.md, "Circuit
-- breakers"): no consumer reserves until `breaker_until`, then one takes the probe
-- (flow.lua). Never shortens an open breaker; a probe's slot is freed (the probe failed, or
-- fresh failures elsewhere make it moot), so the next probe goes after this cool-down.
-- Closing is one command: HDEL <flow> breaker_until breaker_probe.
-- KEYS: flow. ARGV: cool_down_ms. Returns breaker_until (ms, Redis's clock).
expect('breaker_trip', 1, 1, 1, { 1 })
local until_ms = now_ms() + math.max(0, tonumber(ARGV[1]))
local current = tonumber(redis.call('HGET', KEYS[1], 'breaker_until'))
if current and current > until_ms then
  until_ms = current
else
  redis.call('HSET', KEYS[1], 'breaker_until', until_ms)
end
redis.call('HDEL', KEYS[1], 'breaker_probe')
return until_ms
