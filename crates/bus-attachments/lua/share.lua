-- Makes a complete attachment shared by the copies of one published event: its refs hash
-- says the publisher still holds it (`pending`) and counts the copies' holds (`holders`,
-- 0 until the publisher hands over; copies acknowledged before that take it below 0).
-- The refs hash takes the meta hash's expiry. Returns 0 when the attachment is gone.
-- KEYS[1] refs hash, KEYS[2] meta hash.
local ttl = redis.call('PTTL', KEYS[2])
if ttl == -2 then
  return 0
end
redis.call('HSET', KEYS[1], 'pending', 1, 'holders', 0)
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
