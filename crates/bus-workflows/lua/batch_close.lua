-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: batch_close expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 0 then error({ err = 'ERR bus: batch_close expects 0 ARGV (none), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local BATCH, CALLBACKS = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Closes the batch (no more members but from its own unsettled ones) and returns the
-- callbacks that fire now, as fire() returns them (an empty batch, or every member settled
-- already). Returns -1 when the batch does not exist.
if redis.call('EXISTS', BATCH) == 0 then
  return -1
end
redis.call('HSET', BATCH, 'closed', 1)
return fire(BATCH, CALLBACKS)
