-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 1 then error({ err = 'ERR bus: admin_delete_dead expects at least 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: admin_delete_dead expects 1 ARGV (record), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local DEAD = KEYS[1]
-- (end of the generated shape)
-- KEYS: dead-letter list, [Laravel: the DLQ's notify list]
-- ARGV: the record exactly as read from the DLQ
-- Deletes one dead-letter record, in one step: it leaves the DLQ (on Laravel with one
-- wake-up token, as a pop takes one, so the notify list keeps the DLQ's length), or it
-- is gone already and nothing changes. Returns 1 (deleted) or 0 (gone).
if redis.call('lrem', DEAD, 1, ARGV[1]) == 1 then
    if #KEYS == 2 then
        redis.call('lpop', KEYS[2])
    end
    return 1
end
return 0
