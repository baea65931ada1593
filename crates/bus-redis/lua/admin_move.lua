-- Move dead letters to another queue in the same hash slot (another subscription of the
-- same topic): each envelope is appended to the target's ready list as a fresh element
-- (the target's reserve gives it a new storage id and delivery count) and every trace of
-- it is removed from the source.
-- KEYS: dead, msgs, dead-info, errors, deliveries, target ready.
-- ARGV: 'all', max  |  'ids', id...
-- Returns { moved ids, skipped ids } as requeue.lua does.
expect_selection('admin_move', 6)
local taken, skipped = take_dead(KEYS[1], function(id)
  return redis.call('HEXISTS', KEYS[2], id) == 1
end)
for _, id in ipairs(taken) do
  redis.call('RPUSH', KEYS[6], redis.call('HGET', KEYS[2], id))
end
bulk('HDEL', KEYS[2], taken)
bulk('HDEL', KEYS[3], taken)
bulk('HDEL', KEYS[4], taken)
bulk('HDEL', KEYS[5], taken)
return { taken, skipped }
