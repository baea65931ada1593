-- Ack: remove handled messages.
-- KEYS: inflight, msgs, deliveries, errors, isolated.  ARGV: id, count, id, count, ...
local done = {}
for i = 1, #ARGV, 2 do
  if current(KEYS[1], KEYS[3], ARGV[i], ARGV[i + 1]) then
    done[#done + 1] = ARGV[i]
  end
end
bulk('ZREM', KEYS[1], done)
bulk('HDEL', KEYS[2], done)
bulk('HDEL', KEYS[3], done)
bulk('HDEL', KEYS[4], done)
if redis.call('SCARD', KEYS[5]) > 0 then bulk('SREM', KEYS[5], done) end
return #done
