-- Marks an attachment complete: writes its meta hash with the same expiry as its data.
-- An attachment without a meta hash is incomplete and never read.
-- KEYS[1] meta hash, KEYS[2] data list; ARGV[1] TTL in milliseconds;
-- ARGV[2] number of chunks expected; ARGV[3..] field, value pairs.
local chunks = tonumber(ARGV[2])
if chunks > 0 and redis.call('LLEN', KEYS[2]) ~= chunks then
  return redis.error_reply('attachment chunks missing (expired?)')
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if chunks > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return 1
