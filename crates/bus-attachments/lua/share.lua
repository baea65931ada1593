-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: share expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 0 then error({ err = 'ERR bus: share expects 0 ARGV (none), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local REFS, META = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Makes a complete attachment shared by the copies of one published event: its refs hash
-- says the publisher still holds it (`pending`) and counts the copies' holds (`holders`,
-- 0 until the publisher hands over; copies acknowledged before that take it below 0).
-- The refs hash takes the meta hash's expiry. Returns 0 when the attachment is gone.
-- REFS refs hash, META meta hash.
local ttl = redis.call('PTTL', META)
if ttl == -2 then
  return 0
end
redis.call('HSET', REFS, 'pending', 1, 'holders', 0)
if ttl > 0 then
  redis.call('PEXPIRE', REFS, ttl)
end
return 1
