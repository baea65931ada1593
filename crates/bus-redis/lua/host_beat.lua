-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: host_beat expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: host_beat expects 3 ARGV (host, record, keep_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: host_beat expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local HOSTS_INFO, HOSTS_SEEN = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- A host's heartbeat (docs/redis-layout.md, "Host heartbeats").
-- ARGV: host id, its JSON, keep (ms).
-- Returns the time recorded as last seen (Redis's clock, ms).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local keep = tonumber(ARGV[3])
redis.call('HSET', HOSTS_INFO, ARGV[1], ARGV[2])
redis.call('ZADD', HOSTS_SEEN, now, ARGV[1])
-- Records kept past `keep` without a beat are dropped, a bounded batch per beat.
local old = redis.call('ZRANGEBYSCORE', HOSTS_SEEN, '-inf', now - keep, 'LIMIT', 0, 100)
if #old > 0 then
  redis.call('HDEL', HOSTS_INFO, unpack(old))
  redis.call('ZREM', HOSTS_SEEN, unpack(old))
end
redis.call('PEXPIRE', HOSTS_INFO, keep)
redis.call('PEXPIRE', HOSTS_SEEN, keep)
return now
