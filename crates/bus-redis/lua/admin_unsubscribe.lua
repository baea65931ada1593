-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 27 then error({ err = 'ERR bus: admin_unsubscribe expects 27 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: admin_unsubscribe expects 2 ARGV (name, force), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local SUBS, READY, INFLIGHT, DELAYED, DEAD, LEASES, LEASED, MSGS, DELIVERIES, ERRORS, DEAD_INFO, SEQ, SUSPECTS, ISOLATED, FLOW, FLOW_STARTS, KHEADS, KREADY, KBUSY, KOF, KDUE, KWAIT, HOLDERS, SEEN, SINCE, KQ, KSTARTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20], KEYS[21], KEYS[22], KEYS[23], KEYS[24], KEYS[25], KEYS[26], KEYS[27]
-- (end of the generated shape)
-- Remove a subscription: drop its name from the topic's subscriptions (so publishes stop
-- writing to it) and delete its queue's keys, in one step. Unless forced, a subscription
-- whose queue still holds messages (ready or waiting for their key, in flight, delayed or
-- dead) is left untouched.
-- Its KEYS are the topic's subscriptions and every key of the subscription's queue
-- (`QueueKeys::all`); the lists and sets of the leases (named by the tokens in `leases`)
-- are deleted with the rest, and so are an ordered queue's per-key lists and rate windows
-- (`<kq>:<key>`, `<kstarts>:<key>`, the last two KEYS), named by the keys in `kbusy`
-- and `kwait`: a key with waiting messages is in one of them. The window of a key
-- no longer listed expires by itself (at most one window later).
-- ARGV: name, force (1 or 0).
-- Returns { 1, was registered, keys deleted }, or { 0, ready, inflight, delayed, dead }
-- when refused.
if ARGV[2] ~= '0' and ARGV[2] ~= '1' then
  refuse('admin_unsubscribe', string.format('expects force 1 or 0 as ARGV[2], got %s', shown(2)))
end
local held = {
  redis.call('LLEN', READY) + tonumber(redis.call('HGET', FLOW, 'keyed') or '0'),
  redis.call('ZCARD', INFLIGHT) + tonumber(redis.call('GET', LEASED) or '0'),
  redis.call('ZCARD', DELAYED),
  redis.call('LLEN', DEAD),
}
if ARGV[2] ~= '1' and held[1] + held[2] + held[3] + held[4] > 0 then
  return { 0, held[1], held[2], held[3], held[4] }
end
for _, token in ipairs(redis.call('ZRANGE', LEASES, 0, -1)) do
  local lease = LEASES .. ':' .. token
  redis.call('UNLINK', lease, lease .. ':done', lease .. ':keys')
end
local per_key = {}
for _, key in ipairs(redis.call('HKEYS', KBUSY)) do per_key[key] = true end
for _, key in ipairs(redis.call('ZRANGE', KWAIT, 0, -1)) do per_key[key] = true end
local deleted = 0
for key in pairs(per_key) do
  deleted = deleted + redis.call('UNLINK', KQ .. ':' .. key, KSTARTS .. ':' .. key)
end
local was = redis.call('SREM', SUBS, ARGV[1])
deleted = deleted + redis.call('UNLINK', unpack(KEYS, 2, #KEYS - 2))
return { 1, was, deleted }
