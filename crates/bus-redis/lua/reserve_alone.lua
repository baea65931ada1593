-- Reserve alone: the next recovered message, for a consumer that holds nothing else, so
-- that a message that crashed its consumer is charged only its own deliveries.
-- KEYS: suspects, msgs, deliveries, inflight, isolated.  ARGV: lock_ms.
-- Returns { pending, id, count, envelope } (pending: suspects still waiting), or { 0 }.
expect('reserve_alone', 5, 1, 1, { 1 })
local deadline = now_ms() + tonumber(ARGV[1])
-- Bounded: stray references are skipped, at most 100 per call.
for _ = 1, 100 do
  local id = redis.call('LPOP', KEYS[1])
  if not id then return { 0 } end
  local envelope = redis.call('HGET', KEYS[2], id)
  if envelope and not redis.call('ZSCORE', KEYS[4], id) then
    local count = redis.call('HINCRBY', KEYS[3], id, 1)
    redis.call('ZADD', KEYS[4], deadline, id)
    redis.call('SADD', KEYS[5], id)
    return { redis.call('LLEN', KEYS[1]) > 0 and 1 or 0, id, count, envelope }
  end
end
return { 1 }
