-- Ack: remove handled messages whose reservation is current.
-- KEYS: inflight, msgs, deliveries, errors, isolated, leases, leased.
-- ARGV: s, then s stored receipts (id, count), then per lease: token, k, the highest
-- index, and its k indices.
-- Leased messages: per lease, SADD of the indices straight from ARGV (no Lua table) into
-- its `done` set; a lease that is gone (recovered) or too short for the indices is a
-- stale receipt and changes nothing; the lease is deleted when all its messages are done.
-- Stored ones: the token check of the whole batch is two bulk reads (ZMSCORE inflight,
-- HMGET deliveries), the removal bulk writes.
-- Returns the number of messages acked.
local s = tonumber(ARGV[1])
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
end
local i, left = 2 + 2 * s, 0
while i <= #ARGV do
  local token, last = ARGV[i], i + 2 + tonumber(ARGV[i + 1])
  local lease = KEYS[6] .. ':' .. token
  local len = redis.call('LLEN', lease)
  if tonumber(ARGV[i + 2]) < len then
    local done = lease .. ':done'
    for j = i + 3, last, 1000 do
      left = left + redis.call('SADD', done, unpack(ARGV, j, math.min(j + 999, last)))
    end
    if redis.call('SCARD', done) >= len then
      redis.call('DEL', lease, done)
      redis.call('ZREM', KEYS[6], token)
    end
  end
  i = last + 1
end
if left > 0 then unleased(KEYS[7], left) end
return acked + left
