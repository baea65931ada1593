-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: laravel_return expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local RESERVED, READY, NOTIFY = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- KEYS: reserved, ready, notify; ARGV: pairs of reserved member, job
-- Hands reservations that never started back to the head of the ready list unchanged
-- (attempts not counted), gated on each reservation. Returns 1 or 0 per pair.
local out = {}
for i = 1, #ARGV, 2 do
    if redis.call('zrem', RESERVED, ARGV[i]) == 1 then
        redis.call('lpush', READY, ARGV[i + 1])
        redis.call('rpush', NOTIFY, 1)
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
