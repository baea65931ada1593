-- Read a delayed message: its due time and element, in one look (docs/redis-layout.md,
-- "Delayed messages by id").
-- KEYS: delayed, msgs.  ARGV: id.
-- Returns {due_ms, element}, or an empty array when nothing waits under the id.
expect('read_scheduled', 2, 1, 1)
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due then return {} end
local element = redis.call('HGET', KEYS[2], ARGV[1])
if not element then return {} end
return { math.floor(tonumber(due)), element }
