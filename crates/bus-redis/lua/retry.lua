-- Retry: record the error, then make the message ready now or after a delay.
-- KEYS: inflight, deliveries, errors, ready, delayed, isolated.
-- ARGV: id, count, delay_ms, error.
local id = ARGV[1]
if not current(KEYS[1], KEYS[2], id, ARGV[2]) then return 0 end
local now = now_ms()
redis.call('ZREM', KEYS[1], id)
redis.call('SREM', KEYS[6], id)
append_error(KEYS[3], id, ARGV[4], now)
local delay = tonumber(ARGV[3])
if delay <= 0 then
  redis.call('RPUSH', KEYS[4], id)
else
  schedule(KEYS[5], KEYS[4], now + delay, { id })
end
return 1
