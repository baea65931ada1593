-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 5 then error({ err = 'ERR bus: admin_requeue expects 5 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: admin_requeue expects at least 1 ARGV (selection), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local DEAD, MSGS, DEAD_INFO, DELIVERIES, READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- (end of the generated shape)
-- Requeue dead letters onto their own queue: each id leaves the dead list and goes to the
-- tail of the ready list, with its dead-letter info and delivery count removed (so it gets
-- its full delivery limit again). Its error history is kept: a message that fails again
-- shows the old errors before the new ones.
-- ARGV: 'all', max  |  'ids', id...
-- Returns { requeued ids, skipped ids }: skipped ids have no stored envelope (damaged by
-- hand) and stay dead; ids not in the dead list are in neither.
expect_selection('admin_requeue')
local taken, skipped = take_dead(DEAD, function(id)
  return redis.call('HEXISTS', MSGS, id) == 1
end)
bulk('HDEL', DEAD_INFO, taken)
bulk('HDEL', DELIVERIES, taken)
bulk('RPUSH', READY, taken)
return { taken, skipped }
