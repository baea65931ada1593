-- Dead-letter: move the message to the dead-letter list with a reason and the error.
-- KEYS: inflight, deliveries, errors, dead, dead-info, isolated, msgs, leases, leased.
-- ARGV: id, count, reason, error (a leased message: token, index, reason, error).
-- A leased message is stored first, with its one delivery (common.lua's leave_flight).
expect('dead_letter', 9, 4, 4)
local id = leave_flight(KEYS[1], KEYS[2], KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[1], ARGV[2])
if not id then return 0 end
bury(KEYS[3], KEYS[4], KEYS[5], id, ARGV[3], ARGV[4], now_ms())
return 1
