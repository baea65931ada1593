-- Changes the holders of an attachment, once per token (a re-sent call changes nothing),
-- and deletes it when the publisher has handed over and no holder is left:
-- - 'release': a message whose ack is stored, or a dead letter deleted, lets go (-1). An
--   attachment without a refs hash is not shared (a command's): a release deletes it.
-- - 'handover': the publisher of an event hands over to the n subscriptions that stored
--   a copy (+n, and it no longer holds it itself).
-- KEYS[1] refs hash, KEYS[2] meta hash, KEYS[3] data list;
-- ARGV[1] 'release' or 'handover', ARGV[2] the change, ARGV[3] token.
-- Returns 1 when it deleted the attachment, else 0.
local handover = ARGV[1] == 'handover'
if redis.call('EXISTS', KEYS[1]) == 0 then
  if not handover and redis.call('DEL', KEYS[2], KEYS[3]) > 0 then
    return 1
  end
  return 0
end
if redis.call('HSETNX', KEYS[1], 't:' .. ARGV[3], 1) == 0 then
  return 0
end
local holders = redis.call('HINCRBY', KEYS[1], 'holders', ARGV[2])
if handover then
  redis.call('HDEL', KEYS[1], 'pending')
end
if holders <= 0 and redis.call('HEXISTS', KEYS[1], 'pending') == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return 1
end
return 0
