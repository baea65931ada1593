-- Dead-letter: move the message to the dead-letter list with a reason and the error.
-- KEYS: inflight, deliveries, errors, dead, dead-info, isolated, msgs, leases, leased.
-- ARGV: id, count, reason, error (a leased message: token, index, reason, error).
-- A leased message is stored first (common.lua's store_leased), with its one delivery.
local id = ARGV[1]
if is_lease(id) then
  local envelope = unlease(KEYS[8], KEYS[9], id, ARGV[2])
  if not envelope then return 0 end
  id = store_leased(KEYS[7], KEYS[2], id, ARGV[2], envelope)
else
  if not current(KEYS[1], KEYS[2], id, ARGV[2]) then return 0 end
  redis.call('ZREM', KEYS[1], id)
  redis.call('SREM', KEYS[6], id)
end
bury(KEYS[3], KEYS[4], KEYS[5], id, ARGV[3], ARGV[4], now_ms())
return 1
