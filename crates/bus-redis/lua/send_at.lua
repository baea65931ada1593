-- Delayed send: store envelopes and schedule their ids.
-- KEYS: delayed, msgs, ready.  ARGV: due_ms, id, envelope, id, envelope, ...
-- Like send, a re-sent batch (first id already stored) stores nothing. The i-th message
-- of a batch is due i microseconds after the first, so that a batch is promoted in the
-- order sent whatever its ids (equal scores would sort by id).
expect('send_at', 3, 1, nil, { 1 })
if #ARGV % 2 == 0 then
  refuse('send_at', string.format('expects the due time, then id, envelope pairs, got %d ARGV', #ARGV))
end
if #ARGV < 2 or redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return 0 end
for i = 2, #ARGV, 2 do
  -- Ids starting with '~' are the storage ids reserve hands out; reserve tells an
  -- envelope from a stored id by a first byte '{' or >= 0x80 (common.lua).
  if string.sub(ARGV[i], 1, 1) == '~' or surely_fresh(ARGV[i]) then
    return redis.error_reply('message ids must not start with ~, { or a byte >= 0x80')
  end
end
local fields, ids = {}, {}
for i = 2, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  ids[#ids + 1] = ARGV[i]
end
bulk('HSET', KEYS[2], fields)
schedule(KEYS[1], KEYS[3], tonumber(ARGV[1]), ids, 0.001)
return #ids
