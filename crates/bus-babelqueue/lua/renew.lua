-- KEYS: the sorted set of reservations (legacy :processing:deadlines, Laravel :reserved)
-- ARGV: new score, members...
-- Extends each reservation that still exists; returns 1 (kept) or 0 (lost) per member.
local out = {}
for i = 2, #ARGV do
    if redis.call('zscore', KEYS[1], ARGV[i]) then
        redis.call('zadd', KEYS[1], 'XX', ARGV[1], ARGV[i])
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
