-- Shared by the legacy reserve and recover scripts (prepended at compile time).
-- Moves reservations whose deadline (whole seconds) lapsed back to the END of the ready
-- list, bytes unchanged (the SDKs count no attempt there). Every lapsed member leaves the
-- deadline set; a malformed one (no 32-character token and ':') or an orphan (its value
-- is no longer in flight) only so. Bounded by `batch`.
-- Each recovery is counted out of band, in the hash `recoveries` (field: SHA-1 of the
-- element; SDKs never read it), so that a message that kills every consumer reaches the
-- delivery limit; the hash expires RECOVERY_TTL seconds after its last recovery.
local RECOVERY_TTL = 604800
local function sweep(ready, processing, deadlines, recoveries, now, batch)
    local members = redis.call('zrangebyscore', deadlines, '-inf', now, 'limit', 0, batch)
    local moved = 0
    for _, m in ipairs(members) do
        if #m >= 34 and string.byte(m, 33) == 58 then
            local raw = string.sub(m, 34)
            if redis.call('lrem', processing, 1, raw) == 1 then
                redis.call('rpush', ready, raw)
                redis.call('hincrby', recoveries, redis.sha1hex(raw), 1)
                moved = moved + 1
            end
        end
        redis.call('zrem', deadlines, m)
    end
    if moved > 0 then
        redis.call('expire', recoveries, RECOVERY_TTL)
    end
    return moved
end
