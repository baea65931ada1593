-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: read_scheduled expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: read_scheduled expects 1 ARGV (id), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local DELAYED, MSGS = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Read a delayed message: its due time and element, in one look (docs/redis-layout.md,
-- "Delayed messages by id").
-- ARGV: id.
-- Returns {due_ms, element}, or an empty array when nothing waits under the id.
local due = redis.call('ZSCORE', DELAYED, ARGV[1])
if not due then return {} end
local element = redis.call('HGET', MSGS, ARGV[1])
if not element then return {} end
return { math.floor(tonumber(due)), element }
