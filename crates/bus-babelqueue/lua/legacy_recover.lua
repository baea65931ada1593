-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: legacy_recover expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: legacy_recover expects 2 ARGV (now, batch), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: legacy_recover expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, PROCESSING, DEADLINES, RECOVERIES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- KEYS: ready, processing, deadlines, recoveries; ARGV: now (s), batch.
-- Returns how many moved.
return sweep(READY, PROCESSING, DEADLINES, RECOVERIES, ARGV[1], tonumber(ARGV[2]))
