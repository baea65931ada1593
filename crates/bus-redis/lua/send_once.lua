-- Deduplicated send: store the message unless its deduplication key is held; the check,
-- the key and the store are one step (docs/redis-layout.md, "Deduplication").
-- KEYS: dedup, ready, delayed, msgs.
-- ARGV: window_ms, due_ms ('' : ready now), id, envelope.
-- Returns 1 when stored, or the id of the message stored with the key (nothing stored).
expect('send_once', 4, 4, 4, { 1 })
if ARGV[2] ~= '' and not is_integer(ARGV[2]) then
  refuse('send_once', string.format('expects an integer or nothing as ARGV[2], got %s', shown(2)))
end
if tonumber(ARGV[1]) < 1 then
  refuse('send_once', 'expects a window of at least 1 ms as ARGV[1]')
end
local first = redis.call('GET', KEYS[1])
if first then return first end
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
  redis.call('RPUSH', KEYS[2], ARGV[4])
  return 1
end
-- A delayed message is stored under its id, as send_at does (same checks).
if string.sub(ARGV[3], 1, 1) == '~' or surely_fresh(ARGV[3]) then
  return redis.error_reply('message ids must not start with ~, { or a byte >= 0x80')
end
if redis.call('HEXISTS', KEYS[4], ARGV[3]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[4])
schedule(KEYS[3], KEYS[2], tonumber(ARGV[2]), { ARGV[3] })
return 1
