-- Sets a new expiry on a complete attachment (and its refs hash, if shared); 0 when it
-- is gone.
-- KEYS[1] meta hash, KEYS[2] data list[, KEYS[3] refs hash: optional, as before it existed];
-- ARGV[1] TTL in milliseconds.
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[1])
if KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
end
return 1
