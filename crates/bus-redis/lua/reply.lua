-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: reply expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: reply expects 2 ARGV (envelope, keep_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: reply expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INBOX = KEYS[1]
-- (end of the generated shape)
-- Pushes a reply onto a requester's inbox and sets the inbox's expiry, in one step, so
-- that no reply sits in a list without one (docs/redis-layout.md, "Request and reply").
-- INBOX inbox (keys::reply_inbox); ARGV[1] the reply's envelope, ARGV[2] keep in ms.
-- Returns 1.
redis.call('RPUSH', INBOX, ARGV[1])
redis.call('PEXPIRE', INBOX, ARGV[2])
return 1
