-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 1 then error({ err = 'ERR bus: admin_purge expects at least 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: admin_purge expects 2 ARGV (max_ready, max_delayed), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: admin_purge expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY = KEYS[1]
-- (end of the generated shape)
-- KEYS: ready list, [Laravel: notify list, delayed sorted set]
-- ARGV: at most this many ready elements, at most this many delayed ones
-- Deletes waiting messages from the head of the ready list (on Laravel with one wake-up
-- token each, as a pop takes one) and the earliest delayed ones. Reserved (in-flight)
-- messages and dead letters are not touched. Bounded by ARGV, so Redis is never blocked
-- for long; the caller loops. Returns {ready deleted, delayed deleted}.
local ready, delayed = 0, 0
local want = tonumber(ARGV[1])
if want > 0 then
    local taken = redis.call('lpop', READY, want)
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
