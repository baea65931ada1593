-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 5 then error({ err = 'ERR bus: cancel expects 5 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: cancel expects 1 ARGV (id), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local DELAYED, MSGS, DELIVERIES, ERRORS, KDUE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- (end of the generated shape)
-- Cancel a delayed message: remove it before it becomes ready (docs/redis-layout.md,
-- "Delayed messages by id").
-- ARGV: id (a delayed send's message id, or a waiting retry's storage id).
-- Returns 1 when it was waiting and is gone, 0 when nothing waits under the id.
if redis.call('ZREM', DELAYED, ARGV[1]) == 0 then return 0 end
redis.call('HDEL', MSGS, ARGV[1])
redis.call('HDEL', DELIVERIES, ARGV[1])
redis.call('HDEL', ERRORS, ARGV[1])
redis.call('HDEL', KDUE, ARGV[1])
return 1
