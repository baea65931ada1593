-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: legacy_settle expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: legacy_settle expects at least 1 ARGV (mode), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local PROCESSING, DEADLINES, TARGET, RECOVERIES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- KEYS: processing, deadlines, target list (unused for 'ack'), recoveries
-- ARGV: mode ('ack' | 'tail' | 'head'), then triples: deadline member, raw, target body
-- Gated, as BabelQueue's settle: each item acts only while its own deadline member
-- exists, so a late settle of a swept reservation touches nothing, and a re-sent call
-- does nothing twice. 'tail' / 'head' push the target body onto TARGET. 'ack' and
-- 'tail' (a retry or a dead letter: the element is gone) drop its recovery count;
-- 'head' (a release: the element returns unchanged) keeps it.
-- Returns one 1 (settled) or 0 (not reserved any more) per item.
local mode = ARGV[1]
local counted = mode ~= 'head' and redis.call('exists', RECOVERIES) == 1
local out = {}
for i = 2, #ARGV, 3 do
    if redis.call('zrem', DEADLINES, ARGV[i]) == 1 then
        redis.call('lrem', PROCESSING, 1, ARGV[i + 1])
        if mode == 'tail' then
            redis.call('rpush', TARGET, ARGV[i + 2])
        elseif mode == 'head' then
            redis.call('lpush', TARGET, ARGV[i + 2])
        end
        if counted then
            redis.call('hdel', RECOVERIES, redis.sha1hex(ARGV[i + 1]))
        end
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
