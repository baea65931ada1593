-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 11 then error({ err = 'ERR bus: admin_move expects 11 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: admin_move expects at least 1 ARGV (selection), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local DEAD, MSGS, DEAD_INFO, ERRORS, DELIVERIES, TARGET_READY, KOF, KBUSY, KHEADS, KQ, READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
-- (end of the generated shape)
-- Move dead letters to another queue in the same hash slot (another subscription of the
-- same topic): each envelope is appended to the target's ready list as a fresh element
-- (the target's reserve gives it a new storage id and delivery count) and every trace of
-- it is removed from the source.
-- Per-key ordering: a moved dead letter that still holds its key's slot (a
-- blocking one: its id is in `kof`) gives the slot back, as a delete does (keyed.lua's
-- keys_freed): its message leaves this queue, so the key's later messages move on.
-- ARGV: 'all', max  |  'ids', id...
-- Returns { moved ids, skipped ids } as requeue.lua does.
expect_selection('admin_move')
local taken, skipped = take_dead(DEAD, function(id)
  return redis.call('HEXISTS', MSGS, id) == 1
end)
if #taken > 0 and redis.call('EXISTS', KOF) == 1 then
  keys_freed(KOF, KBUSY, KHEADS, KQ, READY, taken)
end
for _, id in ipairs(taken) do
  redis.call('RPUSH', TARGET_READY, redis.call('HGET', MSGS, id))
end
bulk('HDEL', MSGS, taken)
bulk('HDEL', DEAD_INFO, taken)
bulk('HDEL', ERRORS, taken)
bulk('HDEL', DELIVERIES, taken)
return { taken, skipped }
