-- Renew: extend the locks of held messages. Allowed on a full Redis (it only rewrites
-- existing scores), so that locks hold while operators drain a full Redis.
-- KEYS: inflight, deliveries.  ARGV: lock_ms, id, count, id, count, ...
-- Returns 1 per message whose lock was extended, 0 where it was lost.
local deadline = now_ms() + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  if current(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
