-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: batch_add expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: batch_add expects 3 ARGV (token, count, adder), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2, 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_add expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, ADDS, DONE = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Takes `count` member indices for the add named `token` and returns the first; the same
-- token again returns the same indices, so a re-sent add takes none twice. Refused once
-- the batch is closed, unless `adder` (-1: none) is one of its members not settled yet
-- (the batch cannot finish before that member does), and once it has finished.
-- Returns {'OK', first} | {'NOT_FOUND'} | {'CLOSED'} | {'FINISHED'}.
if tonumber(ARGV[2]) < 0 then
  error({ err = 'ERR bus: batch_add expects a count of at least 0 (docs/wire-format.md, "Workflows")' })
end
local b = redis.call('HMGET', BATCH, 'state', 'closed', 'total')
if not b[1] then
  return { 'NOT_FOUND' }
end
local prior = redis.call('HGET', ADDS, ARGV[1])
if prior then
  return { 'OK', tonumber(prior) }
end
if b[1] ~= 'open' then
  return { 'FINISHED' }
end
local total = tonumber(b[3])
if b[2] == '1' then
  local adder = tonumber(ARGV[3])
  if adder < 0 or adder >= total or redis.call('GETBIT', DONE, adder) == 1 then
    return { 'CLOSED' }
  end
end
redis.call('HINCRBY', BATCH, 'total', ARGV[2])
redis.call('HSET', ADDS, ARGV[1], total)
return { 'OK', total }
