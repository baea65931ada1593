-- Recover: messages whose lock expired, counting the lost delivery. One that was held
-- alone (reserve_alone.lua) failed by itself: at the delivery limit it is dead-lettered,
-- else it waits to run alone again. One held with others goes to `suspects`, to be
-- delivered alone, so that a crasher never takes its batch-mates down. Bounded per call.
-- KEYS: inflight, deliveries, errors, suspects, dead, dead-info, isolated.
-- ARGV: delivery_limit, batch, error.
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local limit = tonumber(ARGV[1])
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local alone = redis.call('SREM', KEYS[7], id) == 1
  if alone and tonumber(redis.call('HGET', KEYS[2], id) or '0') >= limit then
    bury(KEYS[3], KEYS[5], KEYS[6], id, 'delivery_limit', ARGV[3], now)
  else
    append_error(KEYS[3], id, ARGV[3], now)
    redis.call('RPUSH', KEYS[4], id)
  end
end
return #expired
