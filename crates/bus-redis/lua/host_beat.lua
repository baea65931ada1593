-- A host's heartbeat (docs/redis-layout.md, "Host heartbeats").
-- KEYS: info hash, seen sorted set. ARGV: host id, its JSON, keep (ms).
-- Returns the time recorded as last seen (Redis's clock, ms).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local keep = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
-- Records kept past `keep` without a beat are dropped, a bounded batch per beat.
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - keep, 'LIMIT', 0, 100)
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return now
