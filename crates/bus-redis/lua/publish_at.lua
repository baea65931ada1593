-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 1 then error({ err = 'ERR bus: publish_at expects at least 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: publish_at expects at least 1 ARGV (s), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: publish_at expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local SUBS = KEYS[1]
-- (end of the generated shape)
-- Delayed publish: a copy of every event to every subscription of the topic, each
-- stored and scheduled at the due time there, all or none (docs/redis-layout.md,
-- "Delayed publish").
-- After `subs`, the KEYS are delayed, msgs and ready of each valid subscription, in the
-- order of ARGV's names.
-- ARGV: S, name_1 .. name_S (every name read), due_ms, id, envelope, id, envelope, ...
-- Returns the number of subscriptions written, or -1 when the caller's list of names is
-- not the current set.
local s = tonumber(ARGV[1])
if s < 0 or #ARGV < 2 + s or (#ARGV - 2 - s) % 2 ~= 0 or #KEYS < 1 or (#KEYS - 1) % 3 ~= 0
    or #KEYS > 1 + 3 * s or not is_integer(ARGV[2 + s]) then
  refuse('publish_at', string.format(
    'expects 1 + 3 per subscription KEYS, S names, the due time and id, envelope pairs (S = %s), got %d KEYS, %d ARGV',
    ARGV[1], #KEYS, #ARGV))
end
if redis.call('SCARD', SUBS) ~= s then return -1 end
for k = 1, s do
  if redis.call('SISMEMBER', SUBS, ARGV[1 + k]) == 0 then return -1 end
end
local due = tonumber(ARGV[2 + s])
local fields, ids = {}, {}
for i = 3 + s, #ARGV, 2 do
  if string.sub(ARGV[i], 1, 1) == '~' or surely_fresh(ARGV[i]) then
    return redis.error_reply('message ids must not start with ~, { or a byte >= 0x80')
  end
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then return 0 end
for k = 2, #KEYS, 3 do
  bulk('HSET', KEYS[k + 1], fields)
  schedule(KEYS[k], KEYS[k + 2], due, ids, 0.001)
end
return (#KEYS - 1) / 3
