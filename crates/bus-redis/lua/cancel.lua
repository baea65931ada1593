-- Cancel a delayed message: remove it before it becomes ready (docs/redis-layout.md,
-- "Delayed messages by id").
-- KEYS: delayed, msgs, deliveries, errors, kdue (protocol 4: a delayed keyed send's key).
-- ARGV: id (a delayed send's message id, or a waiting retry's storage id).
-- Returns 1 when it was waiting and is gone, 0 when nothing waits under the id.
expect('cancel', 5, 1, 1)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
