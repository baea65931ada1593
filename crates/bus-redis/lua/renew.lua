-- Renew: extend the locks of held messages. Allowed on a full Redis (it only rewrites
-- existing scores), so that locks hold while operators drain a full Redis.
-- KEYS: inflight, deliveries, leases.
-- ARGV: lock_ms, s, then s stored receipts (id, count), then lease tokens.
-- Returns 1 per stored receipt and per lease whose lock was extended, 0 where it was lost.
expect('renew', 3, 2, nil, { 1, 2 })
if tonumber(ARGV[2]) < 0 or #ARGV < 2 + 2 * tonumber(ARGV[2]) then
  refuse('renew', string.format('expects %s stored receipts (id, count) after s, got %d ARGV', ARGV[2], #ARGV - 2))
end
local deadline = now_ms() + tonumber(ARGV[1])
local s = tonumber(ARGV[2])
local out = {}
for i = 3, 2 + 2 * s, 2 do
  if current(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
for i = 3 + 2 * s, #ARGV do
  if redis.call('ZSCORE', KEYS[3], ARGV[i]) then
    redis.call('ZADD', KEYS[3], 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
