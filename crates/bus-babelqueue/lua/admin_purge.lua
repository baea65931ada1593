-- KEYS: ready list, [Laravel: notify list, delayed sorted set]
-- ARGV: at most this many ready elements, at most this many delayed ones
-- Deletes waiting messages from the head of the ready list (on Laravel with one wake-up
-- token each, as a pop takes one) and the earliest delayed ones. Reserved (in-flight)
-- messages and dead letters are not touched. Bounded by ARGV, so Redis is never blocked
-- for long; the caller loops. Returns {ready deleted, delayed deleted}.
local ready, delayed = 0, 0
local want = tonumber(ARGV[1])
if want > 0 then
    local taken = redis.call('lpop', KEYS[1], want)
    if taken then
        ready = #taken
        if #KEYS == 3 and ready > 0 then
            redis.call('lpop', KEYS[2], ready)
        end
    end
end
want = tonumber(ARGV[2])
if #KEYS == 3 and want > 0 then
    delayed = #redis.call('zpopmin', KEYS[3], want) / 2
end
return {ready, delayed}
