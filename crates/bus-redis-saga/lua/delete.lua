-- Delete a saga whatever its stamp (a failed start, management). Never deletes a key
-- that is not a saga.
-- KEYS[1] saga key
-- Reply: {'OK'} (also when there was nothing) | {'NOT_A_SAGA', what}
-- Cost: HGET, DEL (TYPE only when the key is not a saga). O(1). Safe to run twice.
local state, detail = inspect(KEYS[1])
if state == 'alien' then
  return {'NOT_A_SAGA', detail}
end
if state == 'saga' then
  redis.call('DEL', KEYS[1])
end
return {'OK'}
