-- KEYS: reserved, ready, notify; ARGV: pairs of reserved member, job
-- Hands reservations that never started back to the head of the ready list unchanged
-- (attempts not counted), gated on each reservation. Returns 1 or 0 per pair.
local out = {}
for i = 1, #ARGV, 2 do
    if redis.call('zrem', KEYS[1], ARGV[i]) == 1 then
        redis.call('lpush', KEYS[2], ARGV[i + 1])
        redis.call('rpush', KEYS[3], 1)
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
