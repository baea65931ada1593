-- Ack: remove handled messages whose reservation is current.
-- KEYS: inflight, msgs, deliveries, errors, isolated, leases, leased, kof, kbusy, kready,
-- kq, ready (protocol 4: an acked keyed message gives its key's slot back; common.lua's
-- keys_freed. Only stored receipts can be keyed: one EXISTS kof per call that has some).
-- ARGV: s, then s stored receipts (id, count), then per lease: token, k, the highest
-- index, and its k indices.
-- Leased messages: per lease, SADD of its indices into its `done` set, straight from ARGV
-- (no Lua table) when all are valid; an index that is not the exact decimal reserve
-- handed out, or not below the lease's length, is a stale receipt and changes nothing
-- (that index only; the highest index is checked for shape only). A lease that is gone
-- (recovered) changes nothing. The lease is deleted when all its messages are done.
-- Stored ones: the token check of the whole batch is two bulk reads (ZMSCORE inflight,
-- HMGET deliveries), the removal bulk writes.
-- Returns the number of messages acked.
expect('ack', 12, 1, nil, { 1 })
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
  local locks = bulk_read('ZMSCORE', KEYS[1], ids)
  local counts = bulk_read('HMGET', KEYS[3], ids)
  local done = {}
  for i = 1, s do
    if locks[i] and counts[i] == ARGV[2 * i + 1] then
      acked = acked + 1
      done[acked] = ids[i]
    end
  end
  bulk('ZREM', KEYS[1], done)
  bulk('HDEL', KEYS[2], done)
  bulk('HDEL', KEYS[3], done)
  if redis.call('EXISTS', KEYS[4]) == 1 then bulk('HDEL', KEYS[4], done) end
  if redis.call('EXISTS', KEYS[5]) == 1 then bulk('SREM', KEYS[5], done) end
  if acked > 0 and redis.call('EXISTS', KEYS[8]) == 1 then
    keys_freed(KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], done, now_ms())
  end
end
local left = 0
at = 2 + 2 * s
while at <= #ARGV do
  local token, last = ARGV[at], at + 2 + tonumber(ARGV[at + 1])
  local lease = KEYS[6] .. ':' .. token
  local len = redis.call('LLEN', lease)
  if len > 0 then
    local done = lease .. ':done'
    -- Per index one pattern match (common.lua's canonical_index, inlined) and, only for
    -- an index with as many digits as the length, a numeric comparison: a canonical
    -- index with fewer digits is below it.
    local stale, find, number, digits = false, string.find, tonumber, #tostring(len)
    for j = at + 3, last do
      local index = ARGV[j]
      if not ((index == '0' or find(index, '^[1-9]%d?%d?$'))
          and (#index < digits or number(index) < len)) then
        stale = true
        break
      end
    end
    if not stale then
      -- The common case: every index valid, added straight from ARGV.
      for j = at + 3, last, 1000 do
        left = left + redis.call('SADD', done, unpack(ARGV, j, math.min(j + 999, last)))
      end
    else
      local valid = {}
      for j = at + 3, last do
        if canonical_index(ARGV[j]) and tonumber(ARGV[j]) < len then valid[#valid + 1] = ARGV[j] end
      end
      for j = 1, #valid, 1000 do
        left = left + redis.call('SADD', done, unpack(valid, j, math.min(j + 999, #valid)))
      end
    end
    if redis.call('SCARD', done) >= len then
      redis.call('DEL', lease, done)
      redis.call('ZREM', KEYS[6], token)
    end
  end
  at = last + 1
end
if left > 0 then unleased(KEYS[7], left) end
return acked + left
