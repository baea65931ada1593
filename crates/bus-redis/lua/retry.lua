-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 11 then error({ err = 'ERR bus: retry expects 11 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 4 then error({ err = 'ERR bus: retry expects 4 ARGV (id, count, delay_ms, error), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: retry expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INFLIGHT, DELIVERIES, ERRORS, READY, DELAYED, ISOLATED, MSGS, LEASES, LEASED, HOLDERS, KOF = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
-- (end of the generated shape)
-- Retry: record the error, then make the message ready now or after a delay.
-- ARGV: id, count, delay_ms, error (a leased message: token, index, delay_ms, error).
-- A leased message is stored first, with its one delivery (common.lua's leave_flight); a
-- keyed one keeps its key's slot (its key in `kof`).
local id = leave_flight(INFLIGHT, DELIVERIES, ISOLATED, MSGS, LEASES, LEASED, HOLDERS, KOF,
  ARGV[1], ARGV[2])
if not id then return 0 end
local now = now_ms()
append_error(ERRORS, id, ARGV[4], now)
local delay = tonumber(ARGV[3])
if delay <= 0 then
  redis.call('RPUSH', READY, id)
else
  schedule(DELAYED, READY, now + delay, { id })
end
return 1
