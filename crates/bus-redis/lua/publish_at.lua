-- Delayed publish: a copy of every event to every subscription of the topic, each
-- stored and scheduled at the due time there, all or none (docs/redis-layout.md,
-- "Delayed publish").
-- KEYS: subs, then delayed, msgs, ready of each valid subscription, in the order of
-- ARGV's names.
-- ARGV: S, name_1 .. name_S (every name read), due_ms, id, envelope, id, envelope, ...
-- Returns the number of subscriptions written, or -1 when the caller's list of names is
-- not the current set.
expect('publish_at', nil, 2, nil, { 1 })
local s = tonumber(ARGV[1])
if s < 0 or #ARGV < 2 + s or (#ARGV - 2 - s) % 2 ~= 0 or #KEYS < 1 or (#KEYS - 1) % 3 ~= 0
    or #KEYS > 1 + 3 * s or not is_integer(ARGV[2 + s]) then
  refuse('publish_at', string.format(
    'expects 1 + 3 per subscription KEYS, S names, the due time and id, envelope pairs (S = %s), got %d KEYS, %d ARGV',
    ARGV[1], #KEYS, #ARGV))
end
if redis.call('SCARD', KEYS[1]) ~= s then return -1 end
for k = 1, s do
  if redis.call('SISMEMBER', KEYS[1], ARGV[1 + k]) == 0 then return -1 end
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
