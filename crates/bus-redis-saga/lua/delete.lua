-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: delete expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 0 then error({ err = 'ERR bus: delete expects 0 ARGV (none), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local SAGA = KEYS[1]
-- (end of the generated shape)
-- Delete a saga whatever its stamp (a failed start, management). Never deletes a key
-- that is not a saga.
-- SAGA saga key
-- Reply: {'OK'} (also when there was nothing) | {'NOT_A_SAGA', what}
-- Cost: HGET, DEL (TYPE only when the key is not a saga). O(1). Safe to run twice.
local state, detail = inspect(SAGA)
if state == 'alien' then
  return {'NOT_A_SAGA', detail}
end
if state == 'saga' then
  redis.call('DEL', SAGA)
end
return {'OK'}
