-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: complete expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: complete expects 1 ARGV (expected), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local SAGA = KEYS[1]
-- (end of the generated shape)
-- Delete a completed saga if its stamp is the one the caller read.
-- SAGA saga key
-- ARGV[1] expected stamp
-- Reply: {'OK'} | {'NOT_FOUND'} | {'CONFLICT'} | {'NOT_A_SAGA', what}
-- Not found is reported before conflict. Cost: HGET, DEL (TYPE only when the key is not a saga). O(1).
-- Run twice, the second run reports NOT_FOUND; the host treats that as completed.
local state, detail = inspect(SAGA)
if state == 'none' then
  return {'NOT_FOUND'}
end
if state == 'alien' then
  return {'NOT_A_SAGA', detail}
end
if detail ~= ARGV[1] then
  return {'CONFLICT'}
end
redis.call('DEL', SAGA)
return {'OK'}
