-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: send_at expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: send_at expects at least 1 ARGV (due_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: send_at expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DELAYED, MSGS, READY = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Delayed send: store envelopes and schedule their ids.
-- ARGV: due_ms, id, envelope, id, envelope, ...
-- Like send, a re-sent batch (first id already stored) stores nothing. The i-th message
-- of a batch is due i microseconds after the first (common.lua's store_delayed).
return #store_delayed('send_at', DELAYED, MSGS, READY, tonumber(ARGV[1]), 2)
