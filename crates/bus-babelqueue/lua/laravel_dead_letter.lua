-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: laravel_dead_letter expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: laravel_dead_letter expects 2 ARGV (member, record), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local RESERVED, DEAD, DEAD_NOTIFY = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- KEYS: reserved, dead-letter list, its notify list; ARGV: reserved member, record
-- The reservation leaves :reserved and the record is pushed in one step, only while the
-- member is still reserved: a lapsed or re-sent call writes nothing. Returns 1 or 0.
if redis.call('zrem', RESERVED, ARGV[1]) == 1 then
    redis.call('rpush', DEAD, ARGV[2])
    redis.call('rpush', DEAD_NOTIFY, 1)
    return 1
end
return 0
