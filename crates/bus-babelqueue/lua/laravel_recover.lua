-- KEYS: ready, reserved, notify, delayed; ARGV: now (s), batch, recover reserved (1/0).
local n = migrate(KEYS[4], KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[2]))
if ARGV[3] == '1' then
    n = n + migrate(KEYS[2], KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[2]))
end
return n
