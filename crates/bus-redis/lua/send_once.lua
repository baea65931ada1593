-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 4 then error({ err = 'ERR bus: send_once expects at least 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 4 then error({ err = 'ERR bus: send_once expects at least 4 ARGV (window_ms, due_ms, id, envelope), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: send_once expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DEDUP, READY, DELAYED, MSGS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- Deduplicated send: store the message unless its deduplication key is held; the check,
-- the key and the store are one step (docs/redis-layout.md, "Deduplication").
-- A keyed send, on a queue ordered per key, adds the KEYS flow, kheads, kbusy, kq and kdue.
-- ARGV: window_ms, due_ms ('' : ready now), id, envelope [, key: with the 9 KEYS].
-- A keyed send on a queue ordered per key is ordered as send_keyed.lua (ready now) or
-- send_keyed_at.lua (delayed) orders it; on any other queue, or without a key, the
-- message goes onto `ready` or into `delayed` as before.
-- Returns 1 when stored, or the id of the message stored with the key (nothing stored).
if #KEYS ~= 4 and #KEYS ~= 9 then
  refuse('send_once', string.format('expects 4 KEYS, or 9 with a key, got %d', #KEYS))
end
local keyed = #KEYS == 9
expect('send_once', nil, keyed and 5 or 4, keyed and 5 or 4, { 1 })
if keyed and ARGV[5] == '' then refuse('send_once', 'expects a non-empty key as ARGV[5]') end
if ARGV[2] ~= '' and not is_integer(ARGV[2]) then
  refuse('send_once', string.format('expects an integer or nothing as ARGV[2], got %s', shown(2)))
end
if tonumber(ARGV[1]) < 1 then
  refuse('send_once', 'expects a window of at least 1 ms as ARGV[1]')
end
local first = redis.call('GET', DEDUP)
if first then return first end
local limit = keyed and tonumber(redis.call('HGET', KEYS[5], 'per_key') or '0') or 0
if ARGV[2] == '' then
  redis.call('SET', DEDUP, ARGV[3], 'PX', ARGV[1])
  if limit > 0 then
    local now = now_ms()
    promote_due(DELAYED, READY, MSGS, KEYS[9], KEYS[5], KEYS[6], KEYS[7], KEYS[8], now)
    join_key(READY, KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[5], { ARGV[4] }, limit)
  else
    redis.call('RPUSH', READY, ARGV[4])
  end
  return 1
end
-- A delayed message is stored under its id, as send_at does (same checks).
if string.sub(ARGV[3], 1, 1) == '~' or surely_fresh(ARGV[3]) then
  return redis.error_reply('message ids must not start with ~, { or a byte >= 0x80')
end
if redis.call('HEXISTS', MSGS, ARGV[3]) == 1 then return 0 end
redis.call('SET', DEDUP, ARGV[3], 'PX', ARGV[1])
redis.call('HSET', MSGS, ARGV[3], ARGV[4])
if limit > 0 then redis.call('HSET', KEYS[9], ARGV[3], ARGV[5]) end
schedule(DELAYED, READY, tonumber(ARGV[2]), { ARGV[3] })
return 1
