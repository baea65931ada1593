-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: singleton_release expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: singleton_release expects 1 ARGV (holder), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local SINGLETON = KEYS[1]
-- (end of the generated shape)
-- Gives a singleton processor's lease up only if this holder has it.
-- SINGLETON lease (keys::singleton); ARGV[1] holder token.
-- Returns 1 when deleted, 0 when another holder has it (or nobody).
if redis.call('GET', SINGLETON) == ARGV[1] then
  return redis.call('DEL', SINGLETON)
end
return 0
