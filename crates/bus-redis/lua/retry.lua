-- Retry: record the error, then make the message ready now or after a delay.
-- KEYS: inflight, deliveries, errors, ready, delayed, isolated, msgs, leases, leased.
-- ARGV: id, count, delay_ms, error (a leased message: token, index, delay_ms, error).
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
local now = now_ms()
append_error(KEYS[3], id, ARGV[4], now)
local delay = tonumber(ARGV[3])
if delay <= 0 then
  redis.call('RPUSH', KEYS[4], id)
else
  schedule(KEYS[5], KEYS[4], now + delay, { id })
end
return 1
