-- Dead-letter: move the message to the dead-letter list with a reason and the error.
-- KEYS: inflight, deliveries, errors, dead, dead-info, isolated.
-- ARGV: id, count, reason, error.
local id = ARGV[1]
if not current(KEYS[1], KEYS[2], id, ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], id)
redis.call('SREM', KEYS[6], id)
bury(KEYS[3], KEYS[4], KEYS[5], id, ARGV[3], ARGV[4], now_ms())
return 1
