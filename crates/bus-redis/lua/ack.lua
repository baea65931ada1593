-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 13 then error({ err = 'ERR bus: ack expects 13 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 2 then error({ err = 'ERR bus: ack expects at least 2 ARGV (s, l), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: ack expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INFLIGHT, MSGS, DELIVERIES, ERRORS, ISOLATED, LEASES, LEASED, KOF, KBUSY, KHEADS, KQ, READY, HOLDERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
-- (end of the generated shape)
-- Ack: remove handled messages whose reservation is current.
-- ARGV: s, l, then s stored receipts (id, count), then l leases: token, bits.
-- Leased messages: `bits` sets bit i (SETBIT's order: index 0 is the first byte's high
-- bit) for each index i of the lease acked; it is ORed into the lease's `done` bitmap in
-- one BITOP, so an ack costs Redis the same whatever the number of messages it settles.
-- A bit at or past the lease's length is a stale receipt and changes nothing (that index
-- only), as is a bit already set. A lease that is gone (recovered) changes nothing. The
-- lease is deleted when all its messages are done.
-- A lease that holds keyed messages (its `keys` list) gives back, in one call for the whole
-- ack, the slot of each keyed message acked for the first time (keyed.lua's slots_freed).
-- Stored ones: the token check of the whole batch is two bulk reads (ZMSCORE inflight,
-- HMGET deliveries), the removal bulk writes.
-- Returns the number of messages acked.
local s, l = tonumber(ARGV[1]), tonumber(ARGV[2])
if s < 0 or l < 0 or #ARGV ~= 2 + 2 * s + 2 * l then
  refuse('ack', string.format(
    'expects %d stored receipts (id, count) and %d leases (token, bits) after s and l, got %d ARGV',
    s, l, #ARGV - 2))
end
local acked = 0
if s > 0 then
  local ids = {}
  for i = 1, s do ids[i] = ARGV[1 + 2 * i] end
  local locks = bulk_read('ZMSCORE', INFLIGHT, ids)
  local counts = bulk_read('HMGET', DELIVERIES, ids)
  local done = {}
  for i = 1, s do
    if locks[i] and counts[i] == ARGV[2 + 2 * i] then
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
local byte, band, bnot = string.byte, bit.band, bit.bnot
for at = 3 + 2 * s, #ARGV, 2 do
  local token, bits = ARGV[at], ARGV[at + 1]
  local lease = LEASES .. ':' .. token
  local len = redis.call('LLEN', lease)
  -- Bits past the lease's last message name none: cut off.
  local size = math.ceil(len / 8)
  if #bits > size then bits = string.sub(bits, 1, size) end
  local tail = len % 8
  if tail > 0 and #bits == size then
    local last = byte(bits, size)
    local kept = band(last, 256 - BIT[tail])
    if kept ~= last then bits = string.sub(bits, 1, size - 1) .. string.char(kept) end
  end
  -- (A lease that is gone has length 0, and every bit is cut.)
  if string.find(bits, '[^%z]') then
    local done = lease .. ':done'
    local keys = lease .. ':keys'
    -- The keyed messages are the lease's last `klen`: those whose bit is set now and was
    -- not before give their keys' slots back.
    local klen = keyed and redis.call('LLEN', keys) or 0
    if klen > 0 then
      -- (Read before it is written: first rewritten, if protocol 9 left it.)
      done_bits(done)
      local first = len - klen
      local from, to = math.floor(first / 8), #bits - 1
      local before = from <= to and redis.call('GETRANGE', done, from, to) or ''
      local new, nn = {}, 0
      for b = from, to do
        local x = band(byte(bits, b + 1), bnot(byte(before, b - from + 1) or 0))
        if x ~= 0 then
          for j = 1, 8 do
            local n = b * 8 + j - 1
            if band(x, BIT[j]) ~= 0 and n >= first then
              nn = nn + 1
              new[nn] = n
            end
          end
        end
      end
      if nn > 0 then
        local of = redis.call('LRANGE', keys, new[1] - first, new[nn] - first)
        for i = 1, nn do
          freed = freed + 1
          slots[freed] = of[new[i] - new[1] + 1]
        end
      end
    end
    -- The lease's first ack writes `done`; a later one ORs its bits in.
    local count = 0
    if not redis.call('SET', done, bits, 'NX') then
      if klen == 0 then done_bits(done) end -- (a keyed lease's was, above)
      count = redis.call('BITCOUNT', done)
      local acking = lease .. ':acking'
      redis.call('SET', acking, bits)
      redis.call('BITOP', 'OR', done, done, acking)
      redis.call('DEL', acking)
    end
    local now_done = redis.call('BITCOUNT', done)
    left = left + now_done - count
    if now_done >= len then
      redis.call('DEL', lease, done, keys)
      redis.call('ZREM', LEASES, token)
      redis.call('HDEL', HOLDERS, token)
    end
  end
end
if left > 0 then unleased(LEASED, left) end
if freed > 0 then slots_freed(KBUSY, KHEADS, KQ, READY, slots) end
return acked + left
