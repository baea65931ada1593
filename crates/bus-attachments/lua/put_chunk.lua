-- Appends chunk number ARGV[2] (0-based) of an attachment and (re)sets the data list's
-- expiry in the same step, so that no chunk is ever stored without its backstop TTL.
-- Safe to run twice (a client re-sends a script in flight when its connection dropped):
-- the chunk is appended only when the list holds exactly the chunks before it.
-- KEYS[1] data list; ARGV[1] chunk bytes; ARGV[2] its index; ARGV[3] TTL in milliseconds.
local index = tonumber(ARGV[2])
local len = redis.call('LLEN', KEYS[1])
if len == index then
  redis.call('RPUSH', KEYS[1], ARGV[1])
elseif len ~= index + 1 then
  return redis.error_reply('attachment chunk ' .. index .. ' out of order: ' .. len .. ' stored (expired?)')
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
