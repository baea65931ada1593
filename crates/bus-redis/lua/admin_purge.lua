-- Purge one batch of waiting messages: up to ARGV[1] elements from the head of the
-- recovered messages waiting to run alone (`suspects`), then of the ready list, and up to
-- ARGV[2] of the earliest delayed ones. A stored message's envelope,
-- delivery count and errors go with it, unless it is referenced elsewhere (common.lua's
-- stray-reference rule: a stray duplicate reference on ready must not delete what a
-- consumer holds).
-- In-flight messages and dead letters are never touched.
-- Per-key ordering (protocol 4): with ARGV[3] >= 0, also the waiting lists of up to
-- ARGV[3] keys popped from `kready` (their envelopes are not stored: deleting the list
-- is all); when `kready` has no more (fewer popped than asked, or 0 asked), the lists of
-- the keys at their limit too (the fields of `kbusy`, bounded by the messages in flight),
-- after which no list is left and the `keyed` count of `flow` is deleted. The slots of
-- messages in flight are untouched (they still hold them); a purged retry of a keyed
-- message (on `ready` or delayed, its id in `kof`) gives its key's slot back, as its ack
-- would, so that the key is not blocked for ever.
-- KEYS: ready, delayed, msgs, deliveries, errors, inflight, dead-info, suspects, flow,
-- kready, kbusy, kq (the prefix of the keys' lists), kdue (a purged delayed keyed send's
-- key goes with it), kwait (the keys over their per-key rate: swept with those at their
-- limit, and deleted), kof (the keys held by keyed messages).
-- ARGV: max ready, max delayed, max keys (-1: leave the keys' lists).
-- Returns { ready purged (a wake-up marker popped is not counted), delayed purged, keyed
-- purged, keys popped, 1 if every key's list is gone else 0 }.
expect('admin_purge', 15, 3, 3, { 1, 2, 3 })
local forget = {}
local ready = {}
if tonumber(ARGV[1]) > 0 then
  ready = redis.call('LPOP', KEYS[8], tonumber(ARGV[1])) or {}
  if #ready < tonumber(ARGV[1]) then
    for _, element in ipairs(redis.call('LPOP', KEYS[1], tonumber(ARGV[1]) - #ready) or {}) do
      ready[#ready + 1] = element
    end
  end
end
-- (The wake-up marker is no message: popped, not counted.)
local woken = 0
for _, element in ipairs(ready) do
  if element == WAKE then woken = woken + 1 end
  if redis.call('HEXISTS', KEYS[3], element) == 1
      and not referenced_elsewhere(KEYS[6], KEYS[2], KEYS[7], element) then
    forget[#forget + 1] = element
  end
end
local delayed = {}
if tonumber(ARGV[2]) > 0 then
  delayed = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
end
bulk('ZREM', KEYS[2], delayed)
bulk('HDEL', KEYS[13], delayed)
for _, id in ipairs(delayed) do
  -- (No longer delayed: only in flight or dead can hold it now.)
  if not referenced_elsewhere(KEYS[6], KEYS[2], KEYS[7], id) then forget[#forget + 1] = id end
end
bulk('HDEL', KEYS[3], forget)
bulk('HDEL', KEYS[4], forget)
bulk('HDEL', KEYS[5], forget)
local keyed, popped, swept = 0, 0, 0
local function drop_list(key)
  local list = KEYS[12] .. ':' .. key
  local n = redis.call('LLEN', list)
  if n > 0 then redis.call('DEL', list) end
  keyed = keyed + n
end
local max_keys = tonumber(ARGV[3])
if max_keys >= 0 then
  if max_keys > 0 then
    local heads = redis.call('ZPOPMIN', KEYS[10], max_keys)
    for i = 1, #heads, 2 do drop_list(heads[i]) end
    popped = #heads / 2
  end
  if popped < max_keys or max_keys == 0 then
    for _, key in ipairs(redis.call('HKEYS', KEYS[11])) do drop_list(key) end
    for _, key in ipairs(redis.call('ZRANGE', KEYS[14], 0, -1)) do drop_list(key) end
    redis.call('DEL', KEYS[14])
    redis.call('HDEL', KEYS[9], 'keyed')
    swept = 1
  elseif keyed > 0 and redis.call('HINCRBY', KEYS[9], 'keyed', -keyed) <= 0 then
    redis.call('HDEL', KEYS[9], 'keyed')
  end
end
-- (After the lists: a freed key whose list was just deleted is not made ready.)
if #forget > 0 and redis.call('EXISTS', KEYS[15]) == 1 then
  keys_freed(KEYS[15], KEYS[11], KEYS[10], KEYS[12], KEYS[1], forget, now_ms())
end
return { #ready - woken, #delayed, keyed, popped, swept }
