-- Delete dead letters: each id still in the dead list leaves it, and its envelope,
-- dead-letter info, errors and delivery count are deleted. An id no longer there (requeued
-- or deleted meanwhile, or a re-sent call) changes nothing, so the call is safe to repeat.
-- KEYS: dead, msgs, dead-info, errors, deliveries.  ARGV: id...
-- Returns the ids deleted.
expect('admin_delete_dead', 5, 0)
local deleted = {}
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 1, id) > 0 then deleted[#deleted + 1] = id end
end
bulk('HDEL', KEYS[2], deleted)
bulk('HDEL', KEYS[3], deleted)
bulk('HDEL', KEYS[4], deleted)
bulk('HDEL', KEYS[5], deleted)
return deleted
