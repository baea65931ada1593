-- Shared by the legacy reserve and recover scripts (prepended at compile time).
-- Moves reservations whose deadline (whole seconds) lapsed back to the END of the ready
-- list, bytes unchanged (a recovery is not an attempt in this layout). Every lapsed member
-- leaves the deadline set; a malformed one (no 32-character token and ':') or an orphan
-- (its value is no longer in flight) only so. Bounded by `batch`.
local function sweep(ready, processing, deadlines, now, batch)
    local members = redis.call('zrangebyscore', deadlines, '-inf', now, 'limit', 0, batch)
    local moved = 0
    for _, m in ipairs(members) do
        if #m >= 34 and string.byte(m, 33) == 58 then
            local raw = string.sub(m, 34)
            if redis.call('lrem', processing, 1, raw) == 1 then
                redis.call('rpush', ready, raw)
                moved = moved + 1
            end
        end
        redis.call('zrem', deadlines, m)
    end
    return moved
end
