-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: reschedule expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: reschedule expects 2 ARGV (id, due_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: reschedule expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DELAYED, READY = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Reschedule a delayed message: move its due time (docs/redis-layout.md, "Delayed
-- messages by id").
-- ARGV: id, due_ms.
-- Returns 1 when it was waiting (now due at due_ms), 0 when nothing waits under the id.
if not redis.call('ZSCORE', DELAYED, ARGV[1]) then return 0 end
schedule(DELAYED, READY, tonumber(ARGV[2]), { ARGV[1] })
return 1
