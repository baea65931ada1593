-- Requeue dead letters onto their own queue: each id leaves the dead list and goes to the
-- tail of the ready list, with its dead-letter info and delivery count removed (so it gets
-- its full delivery limit again). Its error history is kept: a message that fails again
-- shows the old errors before the new ones.
-- KEYS: dead, msgs, dead-info, deliveries, ready.
-- ARGV: 'all', max  |  'ids', id...
-- Returns { requeued ids, skipped ids }: skipped ids have no stored envelope (damaged by
-- hand) and stay dead; ids not in the dead list are in neither.
expect_selection('admin_requeue', 5)
local taken, skipped = take_dead(KEYS[1], function(id)
  return redis.call('HEXISTS', KEYS[2], id) == 1
end)
bulk('HDEL', KEYS[3], taken)
bulk('HDEL', KEYS[4], taken)
bulk('RPUSH', KEYS[5], taken)
return { taken, skipped }
