-- Ack: remove handled messages whose reservation is current.
-- KEYS: inflight, msgs, deliveries, errors, isolated.  ARGV: id, count, id, count, ...
-- The token check of the whole batch is two bulk reads (ZMSCORE inflight, HMGET
-- deliveries); the removal four bulk writes. No per-message call.
local n = #ARGV / 2
local ids = {}
for i = 1, n do ids[i] = ARGV[2 * i - 1] end
if n == 0 then return 0 end
local locks = bulk_read('ZMSCORE', KEYS[1], ids)
local counts = bulk_read('HMGET', KEYS[3], ids)
local done, k = {}, 0
for i = 1, n do
  if locks[i] and counts[i] == ARGV[2 * i] then
    k = k + 1
    done[k] = ids[i]
  end
end
bulk('ZREM', KEYS[1], done)
bulk('HDEL', KEYS[2], done)
bulk('HDEL', KEYS[3], done)
if redis.call('EXISTS', KEYS[4]) == 1 then bulk('HDEL', KEYS[4], done) end
if redis.call('EXISTS', KEYS[5]) == 1 then bulk('SREM', KEYS[5], done) end
return k
