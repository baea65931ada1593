-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 13 then error({ err = 'ERR bus: ack expects 13 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: ack expects at least 1 ARGV (s), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: ack expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INFLIGHT, MSGS, DELIVERIES, ERRORS, ISOLATED, LEASES, LEASED, KOF, KBUSY, KHEADS, KQ, READY, HOLDERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
-- (end of the generated shape)
-- Ack: remove handled messages whose reservation is current.
-- ARGV: s, then s stored receipts (id, count), then per lease: token, k, the highest
-- index, and its k indices.
-- Leased messages: per lease, SADD of its indices into its `done` set, straight from ARGV
-- (no Lua table) when all are valid and none is keyed; an index that is not the exact
-- decimal reserve handed out, or not below the lease's length, is a stale receipt and
-- changes nothing (that index only; the highest index is checked for shape only). A lease
-- that is gone (recovered) changes nothing. The lease is deleted when all its messages are
-- done.
-- A lease that holds keyed messages (its `keys` list) gives back, in one call for the whole
-- ack, the slot of each keyed message acked for the first time (keyed.lua's slots_freed).
-- Stored ones: the token check of the whole batch is two bulk reads (ZMSCORE inflight,
-- HMGET deliveries), the removal bulk writes.
-- Returns the number of messages acked.
local s = tonumber(ARGV[1])
if s < 0 or #ARGV < 1 + 2 * s then
  refuse('ack', string.format('expects %d stored receipts (id, count) after s, got %d ARGV', s, #ARGV - 1))
end
-- Every lease group must fit before anything is written: a cut one is a malformed call.
local at = 2 + 2 * s
while at <= #ARGV do
  local k = ARGV[at + 1]
  if not (k and string.find(k, '^%d+$') and is_integer(ARGV[at + 2])
      and at + 2 + tonumber(k) <= #ARGV) then
    refuse('ack', string.format('expects token, k, highest index and k indices at ARGV[%d]', at))
  end
  at = at + 3 + tonumber(k)
end
local acked = 0
if s > 0 then
  local ids = {}
  for i = 1, s do ids[i] = ARGV[2 * i] end
  local locks = bulk_read('ZMSCORE', INFLIGHT, ids)
  local counts = bulk_read('HMGET', DELIVERIES, ids)
  local done = {}
  for i = 1, s do
    if locks[i] and counts[i] == ARGV[2 * i + 1] then
      acked = acked + 1
      done[acked] = ids[i]
    end
  end
  bulk('ZREM', INFLIGHT, done)
  bulk('HDEL', MSGS, done)
  bulk('HDEL', DELIVERIES, done)
  bulk('HDEL', HOLDERS, done)
  if redis.call('EXISTS', ERRORS) == 1 then bulk('HDEL', ERRORS, done) end
  if redis.call('EXISTS', ISOLATED) == 1 then bulk('SREM', ISOLATED, done) end
  if acked > 0 and redis.call('EXISTS', KOF) == 1 then
    keys_freed(KOF, KBUSY, KHEADS, KQ, READY, done)
  end
end
-- Keyed messages are leased only while some key has a message in flight (`kbusy`).
local keyed, slots, freed = redis.call('EXISTS', KBUSY) == 1, {}, 0
local left = 0
at = 2 + 2 * s
while at <= #ARGV do
  local token, last = ARGV[at], at + 2 + tonumber(ARGV[at + 1])
  local lease = LEASES .. ':' .. token
  local len = redis.call('LLEN', lease)
  if len > 0 then
    local done = lease .. ':done'
    local keys = lease .. ':keys'
    local klen = keyed and last >= at + 3 and redis.call('LLEN', keys) or 0
    -- Per index one pattern match (common.lua's canonical_index, inlined) and, only for
    -- an index with as many digits as the length, a numeric comparison: a canonical
    -- index with fewer digits is below it. (A keyed lease's indices are checked one by one
    -- below instead.)
    local one_by_one, find, number, digits = klen > 0, string.find, tonumber, #tostring(len)
    for j = at + 3, klen == 0 and last or 0 do
      local index = ARGV[j]
      if not ((index == '0' or find(index, '^[1-9]%d?%d?$'))
          and (#index < digits or number(index) < len)) then
        one_by_one = true
        break
      end
    end
    if not one_by_one then
      -- The common case: every index valid, added straight from ARGV.
      for j = at + 3, last, 1000 do
        left = left + redis.call('SADD', done, unpack(ARGV, j, math.min(j + 999, last)))
      end
    else
      -- Index by index, a stale one skipped; a keyed message (one of the lease's last
      -- `klen`) gives its key's slot back the first time it is acked.
      -- (Appends count their table's length: `#t` is a search in Lua 5.1.)
      local valid, seen, unkeyed, nv = {}, {}, len - klen, 0
      -- (No `done` set yet: none of the lease's messages was acked before this call.)
      local fresh = redis.call('EXISTS', done) == 0
      local mine, at_key, low, high, nm = {}, {}, len, 0, 0
      for j = at + 3, last do
        local index = ARGV[j]
        -- (common.lua's canonical_index, inlined.)
        local n = (index == '0' or find(index, '^[1-9]%d?%d?$')) and number(index)
        if n and n < len and not seen[n] then
          seen[n] = true
          nv = nv + 1
          valid[nv] = index
          if n >= unkeyed then
            nm = nm + 1
            mine[nm], at_key[nm] = index, n
            if n < low then low = n end
            if n > high then high = n end
          end
        end
      end
      if nm > 0 then
        local settled = fresh and {} or bulk_read('SMISMEMBER', done, mine)
        local of = redis.call('LRANGE', keys, low - unkeyed, high - unkeyed)
        for i = 1, nm do
          if fresh or settled[i] == 0 then
            freed = freed + 1
            slots[freed] = of[at_key[i] - low + 1]
          end
        end
      end
      for j = 1, nv, 1000 do
        left = left + redis.call('SADD', done, unpack(valid, j, math.min(j + 999, nv)))
      end
    end
    if redis.call('SCARD', done) >= len then
      redis.call('DEL', lease, done, keys)
      redis.call('ZREM', LEASES, token)
      redis.call('HDEL', HOLDERS, token)
    end
  end
  at = last + 1
end
if left > 0 then unleased(LEASED, left) end
if freed > 0 then slots_freed(KBUSY, KHEADS, KQ, READY, slots) end
return acked + left
