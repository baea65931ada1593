-- Holds a running probe's slot of a queue's fleet circuit breaker (protocol 4;
-- docs/redis-layout.md, "Circuit breakers") for one more lock timeout: called by the
-- probe's host each time it renews the probe's lock, so that no second probe starts beside
-- a long one. Nothing when no slot is held (a trip freed it, or the breaker closed).
-- KEYS: flow. ARGV: lock_ms. Returns 1 if the slot was extended, else 0.
expect('breaker_hold', 1, 1, 1, { 1 })
if redis.call('HEXISTS', KEYS[1], 'breaker_probe') == 0 then return 0 end
redis.call('HSET', KEYS[1], 'breaker_probe', now_ms() + tonumber(ARGV[1]))
return 1
