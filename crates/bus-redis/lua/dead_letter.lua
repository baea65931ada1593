-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 16 then error({ err = 'ERR bus: dead_letter expects 16 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 4 then error({ err = 'ERR bus: dead_letter expects 4 ARGV (id, count, reason, error), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local INFLIGHT, DELIVERIES, ERRORS, DEAD, DEAD_INFO, ISOLATED, MSGS, LEASES, LEASED, FLOW, KOF, KBUSY, KHEADS, KQ, READY, HOLDERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
-- (end of the generated shape)
-- Dead-letter: move the message to the dead-letter list with a reason and the error.
-- ARGV: id, count, reason, error (a leased message: token, index, reason, error).
-- A leased message is stored first, with its one delivery (common.lua's leave_flight).
local id = leave_flight(INFLIGHT, DELIVERIES, ISOLATED, MSGS, LEASES, LEASED, HOLDERS, KOF,
  ARGV[1], ARGV[2])
if not id then return 0 end
local now = now_ms()
bury(ERRORS, DEAD, DEAD_INFO, id, ARGV[3], ARGV[4], now)
if not dead_letter_blocks(FLOW) then
  keys_freed(KOF, KBUSY, KHEADS, KQ, READY, { id })
end
return 1
