-- Dead-letter: move the message to the dead-letter list with a reason and the error.
-- KEYS: inflight, deliveries, errors, dead, dead-info, isolated, msgs, leases, leased,
-- flow, kof, kbusy, kready, kq, ready (protocol 4: a keyed message gives its key's slot
-- back, unless the queue's `on_dead` is `block`).
-- ARGV: id, count, reason, error (a leased message: token, index, reason, error).
-- A leased message is stored first, with its one delivery (common.lua's leave_flight).
expect('dead_letter', 15, 4, 4)
local id = leave_flight(KEYS[1], KEYS[2], KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[1], ARGV[2])
if not id then return 0 end
local now = now_ms()
bury(KEYS[3], KEYS[4], KEYS[5], id, ARGV[3], ARGV[4], now)
if not dead_letter_blocks(KEYS[10]) then
  keys_freed(KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], { id }, now)
end
return 1
