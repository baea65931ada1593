-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 8 then error({ err = 'ERR bus: batch_sent expects 8 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: batch_sent expects at least 1 ARGV (retention_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_sent expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, DONE, SETTLING, DEAD, RESULTS, ADDS, DEFER, CALLBACKS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
-- (end of the generated shape)
-- Records fired callbacks (ARGV from the second: their kinds) as stored in their queues.
-- When every fired callback is sent, a batch in `fired` moves on: to `settled` when a
-- member of a parent batch opened it (that member is settled next, then batch_done), else
-- to `done`, its keys then expiring after `retention_ms`.
-- Returns {'PENDING'} | {'PARENT', '<batch>:<index>', failure ('' succeeded)} | {'DONE'}
-- | {'NOT_FOUND'}.
local b = redis.call('HMGET', BATCH, 'state', 'parent', 'outcome', 'dead', 'total')
if not b[1] then
  return { 'NOT_FOUND' }
end
for i = 2, #ARGV do
  redis.call('HSET', BATCH, 'sent:' .. ARGV[i], 1)
end
local state = b[1]
if state == 'fired' then
  for _, kind in ipairs({ 'success', 'complete', 'death', 'continuation' }) do
    if redis.call('HEXISTS', BATCH, 'fired:' .. kind) == 1
        and redis.call('HEXISTS', BATCH, 'sent:' .. kind) == 0 then
      return { 'PENDING' }
    end
  end
  if b[2] ~= '' then state = 'settled' else state = 'done' end
  redis.call('HSET', BATCH, 'state', state)
end
if state == 'settled' then
  return { 'PARENT', b[2], failure(b[3], b[4], b[5]) }
end
if state == 'done' then
  for _, key in ipairs(KEYS) do
    redis.call('PEXPIRE', key, ARGV[1])
  end
  return { 'DONE' }
end
return { 'PENDING' }
