-- KEYS: processing, deadlines, target list (unused for 'ack'), recoveries
-- ARGV: mode ('ack' | 'tail' | 'head'), then triples: deadline member, raw, target body
-- Gated, as BabelQueue's settle: each item acts only while its own deadline member
-- exists, so a late settle of a swept reservation touches nothing, and a re-sent call
-- does nothing twice. 'tail' / 'head' push the target body onto KEYS[3]. 'ack' and
-- 'tail' (a retry or a dead letter: the element is gone) drop its recovery count;
-- 'head' (a release: the element returns unchanged) keeps it.
-- Returns one 1 (settled) or 0 (not reserved any more) per item.
local mode = ARGV[1]
local counted = mode ~= 'head' and redis.call('exists', KEYS[4]) == 1
local out = {}
for i = 2, #ARGV, 3 do
    if redis.call('zrem', KEYS[2], ARGV[i]) == 1 then
        redis.call('lrem', KEYS[1], 1, ARGV[i + 1])
        if mode == 'tail' then
            redis.call('rpush', KEYS[3], ARGV[i + 2])
        elseif mode == 'head' then
            redis.call('lpush', KEYS[3], ARGV[i + 2])
        end
        if counted then
            redis.call('hdel', KEYS[4], redis.sha1hex(ARGV[i + 1]))
        end
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
