-- Sets a new expiry on a complete attachment; 0 when it is gone.
-- KEYS[1] meta hash, KEYS[2] data list; ARGV[1] TTL in milliseconds.
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
