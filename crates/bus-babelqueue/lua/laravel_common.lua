-- Shared by the Laravel reserve and recover scripts (prepended at compile time).
-- Laravel's migrate: members of `from` (delayed or reserved) due by `now` move to the end
-- of the ready list byte for byte, one notify token each. Bounded by `batch`.
local function migrate(from, ready, notify, now, batch)
    local val = redis.call('zrangebyscore', from, '-inf', now, 'limit', 0, batch)
    if next(val) ~= nil then
        redis.call('zremrangebyrank', from, 0, #val - 1)
        for i = 1, #val, 100 do
            local last = math.min(i + 99, #val)
            redis.call('rpush', ready, unpack(val, i, last))
            -- The tokens of a chunk in one push, not one push each.
            local tokens = {}
            for j = 1, last - i + 1 do tokens[j] = 1 end
            redis.call('rpush', notify, unpack(tokens))
        end
    end
    return #val
end
