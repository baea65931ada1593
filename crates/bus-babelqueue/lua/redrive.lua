-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 2 then error({ err = 'ERR bus: redrive expects at least 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local DEAD, TARGET_READY = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- KEYS: dead-letter list, target ready list, [Laravel: target notify list, DLQ notify list]
-- ARGV: pairs: the record exactly as read from the DLQ, the body to publish
-- Per record, one step: it leaves the DLQ and its body joins the target, or (the record
-- is gone: another redrive or reader took it) nothing happens. Never lost, never doubled;
-- a re-sent call finds the records gone and does nothing again. On Laravel a move is a
-- publish (one wake-up token on the target) and a pop (one token off the DLQ's).
-- Returns one 1 (moved) or 0 (gone) per pair.
local out = {}
for i = 1, #ARGV, 2 do
    if redis.call('lrem', DEAD, 1, ARGV[i]) == 1 then
        redis.call('rpush', TARGET_READY, ARGV[i + 1])
        if #KEYS == 4 then
            redis.call('rpush', KEYS[3], 1)
            redis.call('lpop', KEYS[4])
        end
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
