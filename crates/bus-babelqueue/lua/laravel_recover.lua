-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: laravel_recover expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: laravel_recover expects 3 ARGV (now, batch, recover_reserved), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: laravel_recover expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, RESERVED, NOTIFY, DELAYED = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- KEYS: ready, reserved, notify, delayed; ARGV: now (s), batch, recover reserved (1/0).
local n = migrate(DELAYED, READY, NOTIFY, ARGV[1], tonumber(ARGV[2]))
if ARGV[3] == '1' then
    n = n + migrate(RESERVED, READY, NOTIFY, ARGV[1], tonumber(ARGV[2]))
end
return n
