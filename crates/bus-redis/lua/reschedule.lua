-- Reschedule a delayed message: move its due time (docs/redis-layout.md, "Delayed
-- messages by id").
-- KEYS: delayed, ready.  ARGV: id, due_ms.
-- Returns 1 when it was waiting (now due at due_ms), 0 when nothing waits under the id.
expect('reschedule', 2, 2, 2, { 2 })
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
schedule(KEYS[1], KEYS[2], tonumber(ARGV[2]), { ARGV[1] })
return 1
