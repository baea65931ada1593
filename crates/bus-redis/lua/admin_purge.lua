-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 16 then error({ err = 'ERR bus: admin_purge expects 16 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: admin_purge expects 3 ARGV (max_ready, max_delayed, max_keys), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2, 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: admin_purge expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, DELAYED, MSGS, DELIVERIES, ERRORS, INFLIGHT, DEAD_INFO, SUSPECTS, FLOW, KHEADS, KBUSY, KQ, KDUE, KWAIT, KOF, KREADY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
-- (end of the generated shape)
-- Purge one batch of waiting messages: up to ARGV[1] elements from the head of the
-- recovered messages waiting to run alone (`suspects`), then of the ready list, and up to
-- ARGV[2] of the earliest delayed ones. A stored message's envelope,
-- delivery count and errors go with it, unless it is referenced elsewhere (common.lua's
-- stray-reference rule: a stray duplicate reference on ready must not delete what a
-- consumer holds).
-- In-flight messages and dead letters are never touched.
-- Per-key ordering: with ARGV[3] >= 0, also up to ARGV[3] heads popped from `kheads`
-- with the waiting lists of their keys (their envelopes are not stored: deleting the list
-- is all), each head giving its key's slot back; when `kheads` has no more (fewer
-- popped than asked, or 0 asked), the lists of the keys whose slots are taken (the
-- fields of `kbusy`, bounded by the messages in flight) and of the keys over their rate
-- too, and of the keys a protocol-7 client left ready in `kready` (protocol 9: else a
-- later reserve would drain them back into heads, and purged messages would run), after
-- which no list is left and the `keyed` count of `flow` is deleted. The
-- slots of messages in flight are untouched (they still hold them); a purged retry of a
-- keyed message (on `ready` or delayed, its id in `kof`) gives its key's slot back, as its
-- ack would, so that the key is not blocked for ever.
-- ARGV: max ready, max delayed, max keys (-1: leave the keys' lists).
-- Returns { ready purged (a wake-up marker popped is not counted), delayed purged, keyed
-- purged, heads popped, 1 if every key's list is gone else 0 }.
local forget = {}
local ready = {}
if tonumber(ARGV[1]) > 0 then
  ready = redis.call('LPOP', SUSPECTS, tonumber(ARGV[1])) or {}
  if #ready < tonumber(ARGV[1]) then
    for _, element in ipairs(redis.call('LPOP', READY, tonumber(ARGV[1]) - #ready) or {}) do
      ready[#ready + 1] = element
    end
  end
end
-- (The wake-up marker is no message: popped, not counted.)
local woken = 0
for _, element in ipairs(ready) do
  if element == WAKE then woken = woken + 1 end
  if redis.call('HEXISTS', MSGS, element) == 1
      and not referenced_elsewhere(INFLIGHT, DELAYED, DEAD_INFO, element) then
    forget[#forget + 1] = element
  end
end
local delayed = {}
if tonumber(ARGV[2]) > 0 then
  delayed = redis.call('ZRANGE', DELAYED, 0, tonumber(ARGV[2]) - 1)
end
bulk('ZREM', DELAYED, delayed)
bulk('HDEL', KDUE, delayed)
for _, id in ipairs(delayed) do
  -- (No longer delayed: only in flight or dead can hold it now.)
  if not referenced_elsewhere(INFLIGHT, DELAYED, DEAD_INFO, id) then forget[#forget + 1] = id end
end
bulk('HDEL', MSGS, forget)
bulk('HDEL', DELIVERIES, forget)
bulk('HDEL', ERRORS, forget)
local keyed, popped, swept = 0, 0, 0
local function drop_list(key)
  local list = KQ .. ':' .. key
  local n = redis.call('LLEN', list)
  if n > 0 then redis.call('DEL', list) end
  keyed = keyed + n
end
-- Pops up to `n` heads, deletes their keys' lists and gives their slots back.
local function drop_heads(n)
  local heads, keys = redis.call('LPOP', KHEADS, 2 * n) or {}, {}
  for i = 1, #heads, 2 do
    keys[#keys + 1] = heads[i]
    drop_list(heads[i])
  end
  keyed = keyed + #keys
  slots_released(KBUSY, keys)
  return #keys
end
local max_keys = tonumber(ARGV[3])
if max_keys >= 0 then
  if max_keys > 0 then popped = drop_heads(max_keys) end
  if popped < max_keys or max_keys == 0 then
    -- (Heads sent meanwhile, or any when none were asked for.)
    local left = redis.call('LLEN', KHEADS)
    if left > 0 then popped = popped + drop_heads(math.ceil(left / 2)) end
    for _, key in ipairs(redis.call('HKEYS', KBUSY)) do drop_list(key) end
    -- The keys over their rate, and those protocol 7 left ready: their lists, then the set.
    for _, set in ipairs({ KWAIT, KREADY }) do
      for _, key in ipairs(redis.call('ZRANGE', set, 0, -1)) do drop_list(key) end
      redis.call('DEL', set)
    end
    redis.call('HDEL', FLOW, 'keyed')
    swept = 1
  elseif keyed > 0 and redis.call('HINCRBY', FLOW, 'keyed', -keyed) <= 0 then
    redis.call('HDEL', FLOW, 'keyed')
  end
end
-- (After the lists: a freed key whose list was just deleted is not made ready.)
if #forget > 0 and redis.call('EXISTS', KOF) == 1 then
  keys_freed(KOF, KBUSY, KHEADS, KQ, READY, forget)
end
return { #ready - woken, #delayed, keyed, popped, swept }
