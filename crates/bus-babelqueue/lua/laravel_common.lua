-- Shared by the Laravel reserve and recover scripts (prepended at compile time).
-- Laravel's migrate: members of `from` (delayed or reserved) due by `now` move to the end
-- of the ready list byte for byte, one notify token each. Bounded by `batch`.
local function migrate(from, ready, notify, now, batch)
    local val = redis.call('zrangebyscore', from, '-inf', now, 'limit', 0, batch)
    if next(val) ~= nil then
        redis.call('zremrangebyrank', from, 0, #val - 1)
        for i = 1, #val, 100 do
            redis.call('rpush', ready, unpack(val, i, math.min(i + 99, #val)))
            for j = i, math.min(i + 99, #val) do
                redis.call('rpush', notify, 1)
            end
        end
    end
    return #val
end
