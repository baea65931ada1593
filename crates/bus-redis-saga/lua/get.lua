-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: get expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 0 then error({ err = 'ERR bus: get expects 0 ARGV (none), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local SAGA = KEYS[1]
-- (end of the generated shape)
-- Read a saga: the slow path behind HMGET, taken when HMGET did not find both fields
-- (missing saga, or something else at the key), to tell the two apart atomically.
-- SAGA saga key
-- Reply: {'OK', data, stamp} | {'NOT_FOUND'} | {'NOT_A_SAGA', what}
-- Cost: HGET, HGET (TYPE only when the key is not a saga). O(1). Read-only.
local state, detail = inspect(SAGA)
if state == 'none' then
  return {'NOT_FOUND'}
end
if state == 'alien' then
  return {'NOT_A_SAGA', detail}
end
local data = redis.call('HGET', SAGA, 'data')
if not data then
  return {'NOT_A_SAGA', 'a hash without a data field'}
end
return {'OK', data, detail}
