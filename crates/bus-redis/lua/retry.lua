-- Retry: record the error, then make the message ready now or after a delay.
-- KEYS: inflight, deliveries, errors, ready, delayed, isolated, msgs, leases, leased.
-- ARGV: id, count, delay_ms, error (a leased message: token, index, delay_ms, error).
-- A leased message is stored first, with its one delivery (common.lua's leave_flight).
expect('retry', 9, 4, 4, { 3 })
local id = leave_flight(KEYS[1], KEYS[2], KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[1], ARGV[2])
if not id then return 0 end
local now = now_ms()
append_error(KEYS[3], id, ARGV[4], now)
local delay = tonumber(ARGV[3])
if delay <= 0 then
  redis.call('RPUSH', KEYS[4], id)
else
  schedule(KEYS[5], KEYS[4], now + delay, { id })
end
return 1
