-- Move dead letters to another queue in the same hash slot (another subscription of the
-- same topic): each envelope is appended to the target's ready list as a fresh element
-- (the target's reserve gives it a new storage id and delivery count) and every trace of
-- it is removed from the source.
-- Per-key ordering (protocol 4): a moved dead letter that still holds its key's slot (a
-- blocking one: its id is in `kof`) gives the slot back, as a delete does (common.lua's
-- keys_freed): its message leaves this queue, so the key's later messages move on.
-- KEYS: dead, msgs, dead-info, errors, deliveries, target ready, kof, kbusy, kready, kq,
-- ready (the source's own).
-- ARGV: 'all', max  |  'ids', id...
-- Returns { moved ids, skipped ids } as requeue.lua does.
expect_selection('admin_move', 11)
local taken, skipped = take_dead(KEYS[1], function(id)
  return redis.call('HEXISTS', KEYS[2], id) == 1
end)
if #taken > 0 and redis.call('EXISTS', KEYS[7]) == 1 then
  keys_freed(KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], taken, now_ms())
end
for _, id in ipairs(taken) do
  redis.call('RPUSH', KEYS[6], redis.call('HGET', KEYS[2], id))
end
bulk('HDEL', KEYS[2], taken)
bulk('HDEL', KEYS[3], taken)
bulk('HDEL', KEYS[4], taken)
bulk('HDEL', KEYS[5], taken)
return { taken, skipped }
