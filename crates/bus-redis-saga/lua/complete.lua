-- Delete a completed saga if its stamp is the one the caller read.
-- KEYS[1] saga key
-- ARGV[1] expected stamp
-- Reply: {'OK'} | {'NOT_FOUND'} | {'CONFLICT'} | {'NOT_A_SAGA', what}
-- Not found is reported before conflict. Cost: HGET, DEL (TYPE only when the key is not a saga). O(1).
-- Run twice, the second run reports NOT_FOUND; the host treats that as completed.
local state, detail = inspect(KEYS[1])
if state == 'none' then
  return {'NOT_FOUND'}
end
if state == 'alien' then
  return {'NOT_A_SAGA', detail}
end
if detail ~= ARGV[1] then
  return {'CONFLICT'}
end
redis.call('DEL', KEYS[1])
return {'OK'}
