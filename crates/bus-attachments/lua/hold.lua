-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: hold expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: hold expects 3 ARGV (op, change, token), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: hold expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local REFS, META, DATA = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Changes the holders of an attachment, once per token (a re-sent call changes nothing),
-- and deletes it when the publisher has handed over and no holder is left:
-- - 'release': a message whose ack is stored, or a dead letter deleted, lets go (-1). An
--   attachment without a refs hash is not shared (a command's): a release deletes it.
-- - 'handover': the publisher of an event hands over to the n subscriptions that stored
--   a copy (+n, and it no longer holds it itself).
-- REFS refs hash, META meta hash, DATA data list;
-- ARGV[1] 'release' or 'handover', ARGV[2] the change, ARGV[3] token.
-- Returns 1 when it deleted the attachment, else 0.
local handover = ARGV[1] == 'handover'
if redis.call('EXISTS', REFS) == 0 then
  if not handover and redis.call('DEL', META, DATA) > 0 then
    return 1
  end
  return 0
end
if redis.call('HSETNX', REFS, 't:' .. ARGV[3], 1) == 0 then
  return 0
end
local holders = redis.call('HINCRBY', REFS, 'holders', ARGV[2])
if handover then
  redis.call('HDEL', REFS, 'pending')
end
if holders <= 0 and redis.call('HEXISTS', REFS, 'pending') == 0 then
  redis.call('DEL', REFS, META, DATA)
  return 1
end
return 0
