-- KEYS: reserved, delayed; ARGV: reserved member, body, available-at score (s)
-- Laravel's release (ZREM :reserved + ZADD :delayed) in one step, gated on the
-- reservation: once it lapsed and was migrated back, nothing is written (BabelQueue's own
-- release is not gated and then duplicates the message). Safe to run twice.
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
    redis.call('zadd', KEYS[2], ARGV[3], ARGV[2])
    return 1
end
return 0
