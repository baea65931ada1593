-- KEYS: reserved, dead-letter list, its notify list; ARGV: reserved member, record
-- The reservation leaves :reserved and the record is pushed in one step, only while the
-- member is still reserved: a lapsed or re-sent call writes nothing. Returns 1 or 0.
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
    redis.call('rpush', KEYS[3], 1)
    return 1
end
return 0
