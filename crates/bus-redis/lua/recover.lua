-- Recover: return messages whose lock expired to the head of the ready list, counting the
-- lost delivery; dead-letter those that reached the delivery limit. Bounded per call.
-- KEYS: inflight, deliveries, errors, ready, dead, dead-info.
-- ARGV: delivery_limit, batch, error.
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local limit = tonumber(ARGV[1])
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  if tonumber(redis.call('HGET', KEYS[2], id) or '0') >= limit then
    bury(KEYS[3], KEYS[5], KEYS[6], id, 'delivery_limit', ARGV[3], now)
  else
    append_error(KEYS[3], id, ARGV[3], now)
    redis.call('LPUSH', KEYS[4], id)
  end
end
return #expired
