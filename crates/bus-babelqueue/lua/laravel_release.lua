-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: laravel_release expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: laravel_release expects 3 ARGV (member, body, available_at), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local RESERVED, DELAYED = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- KEYS: reserved, delayed; ARGV: reserved member, body, available-at score (s)
-- Laravel's release (ZREM :reserved + ZADD :delayed) in one step, gated on the
-- reservation: once it lapsed and was migrated back, nothing is written (BabelQueue's own
-- release is not gated and then duplicates the message). Safe to run twice.
if redis.call('zrem', RESERVED, ARGV[1]) == 1 then
    redis.call('zadd', DELAYED, ARGV[3], ARGV[2])
    return 1
end
return 0
