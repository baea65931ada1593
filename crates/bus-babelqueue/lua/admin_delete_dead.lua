-- KEYS: dead-letter list, [Laravel: the DLQ's notify list]
-- ARGV: the record exactly as read from the DLQ
-- Deletes one dead-letter record, in one step: it leaves the DLQ (on Laravel with one
-- wake-up token, as a pop takes one, so the notify list keeps the DLQ's length), or it
-- is gone already and nothing changes. Returns 1 (deleted) or 0 (gone).
if redis.call('lrem', KEYS[1], 1, ARGV[1]) == 1 then
    if #KEYS == 2 then
        redis.call('lpop', KEYS[2])
    end
    return 1
end
return 0
