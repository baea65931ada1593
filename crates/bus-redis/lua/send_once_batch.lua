-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 3 then error({ err = 'ERR bus: send_once_batch expects at least 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 4 then error({ err = 'ERR bus: send_once_batch expects at least 4 ARGV (n, window_ms, due_ms, key), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: send_once_batch expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, DELAYED, MSGS = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Deduplicated batch: send_once.lua for many messages in one call. Per message, the check
-- of its deduplication key, the key and the store are one step; a key taken by an earlier
-- message of the same call holds for the later ones (docs/redis-layout.md,
-- "Deduplication").
-- After ready, delayed and msgs, the KEYS are flow, kheads, kbusy, kq and kdue when the
-- messages have a key, then one dedup:<key> per message, in the messages' order.
-- ARGV: n, window_ms, due_ms ('' : ready now), key ('' : none), then n id, envelope pairs.
-- With a key, on a queue ordered per key, the stored messages join the key's order as
-- send_once.lua's keyed form puts one there (now, or at their due time).
-- Returns n replies, in order: 1 when stored, or the id of the message stored with its
-- deduplication key (nothing stored), or 0 for a delayed message whose id is stored
-- already (a re-sent call: nothing stored).
expect('send_once_batch', nil, 6, nil, { 1, 2 })
local n = tonumber(ARGV[1])
if n < 1 then refuse('send_once_batch', 'expects at least 1 message as ARGV[1]') end
local keyed = ARGV[4] ~= ''
local fixed = keyed and 8 or 3
if #KEYS ~= fixed + n then
  refuse('send_once_batch', string.format('expects %d KEYS (%d, then one dedup key per message), got %d',
    fixed + n, fixed, #KEYS))
end
if #ARGV ~= 4 + 2 * n then
  refuse('send_once_batch', string.format('expects %d ARGV (4, then %d id, envelope pairs), got %d',
    4 + 2 * n, n, #ARGV))
end
if ARGV[3] ~= '' and not is_integer(ARGV[3]) then
  refuse('send_once_batch', string.format('expects an integer or nothing as ARGV[3], got %s', shown(3)))
end
if tonumber(ARGV[2]) < 1 then
  refuse('send_once_batch', 'expects a window of at least 1 ms as ARGV[2]')
end
local delayed = ARGV[3] ~= ''
if delayed then
  -- A delayed message is stored under its id, as send_at does (same checks, all first).
  for i = 5, #ARGV, 2 do
    if string.sub(ARGV[i], 1, 1) == '~' or surely_fresh(ARGV[i]) then
      return redis.error_reply('message ids must not start with ~, { or a byte >= 0x80')
    end
  end
end
local limit = keyed and tonumber(redis.call('HGET', KEYS[4], 'per_key') or '0') or 0
local replies, envelopes, ids = {}, {}, {}
for i = 1, n do
  local id, envelope, dedup = ARGV[3 + 2 * i], ARGV[4 + 2 * i], KEYS[fixed + i]
  local first = redis.call('GET', dedup)
  if first then
    replies[i] = first
  elseif delayed and redis.call('HEXISTS', MSGS, id) == 1 then
    replies[i] = 0
  else
    redis.call('SET', dedup, id, 'PX', ARGV[2])
    if delayed then
      redis.call('HSET', MSGS, id, envelope)
      if limit > 0 then redis.call('HSET', KEYS[8], id, ARGV[4]) end
      ids[#ids + 1] = id
    else
      envelopes[#envelopes + 1] = envelope
    end
    replies[i] = 1
  end
end
if #envelopes > 0 then
  if limit > 0 then
    local now = now_ms()
    promote_due(DELAYED, READY, MSGS, KEYS[8], KEYS[4], KEYS[5], KEYS[6], KEYS[7], now)
    join_key(READY, KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[4], envelopes, limit)
  else
    bulk('RPUSH', READY, envelopes)
  end
end
-- Promoted in the order sent, as send_at's batches (one microsecond apart).
if #ids > 0 then schedule(DELAYED, READY, tonumber(ARGV[3]), ids, 0.001) end
return replies
