-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: renew expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: renew expects at least 1 ARGV (score), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local RESERVATIONS = KEYS[1]
-- (end of the generated shape)
-- KEYS: the sorted set of reservations (legacy :processing:deadlines, Laravel :reserved)
-- ARGV: new score, members...
-- Extends each reservation that still exists; returns 1 (kept) or 0 (lost) per member.
local out = {}
for i = 2, #ARGV do
    if redis.call('zscore', RESERVATIONS, ARGV[i]) then
        redis.call('zadd', RESERVATIONS, 'XX', ARGV[1], ARGV[i])
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
