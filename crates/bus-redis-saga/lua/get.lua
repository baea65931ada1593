-- Read a saga: the slow path behind HMGET, taken when HMGET did not find both fields
-- (missing saga, or something else at the key), to tell the two apart atomically.
-- KEYS[1] saga key
-- Reply: {'OK', data, stamp} | {'NOT_FOUND'} | {'NOT_A_SAGA', what}
-- Cost: HGET, HGET (TYPE only when the key is not a saga). O(1). Read-only.
local state, detail = inspect(KEYS[1])
if state == 'none' then
  return {'NOT_FOUND'}
end
if state == 'alien' then
  return {'NOT_A_SAGA', detail}
end
local data = redis.call('HGET', KEYS[1], 'data')
if not data then
  return {'NOT_A_SAGA', 'a hash without a data field'}
end
return {'OK', data, detail}
