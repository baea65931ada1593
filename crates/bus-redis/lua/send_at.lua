-- Delayed send: store envelopes and schedule their ids.
-- KEYS: delayed, msgs.  ARGV: due_ms, id, envelope, id, envelope, ...
local stored = 0
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    stored = stored + 1
  end
end
return stored
