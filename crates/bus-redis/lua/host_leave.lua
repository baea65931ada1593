-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: host_leave expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: host_leave expects 1 ARGV (host), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local HOSTS_INFO, HOSTS_SEEN = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- A host stopped gracefully: its heartbeat record goes.
-- ARGV: host id. Returns 1 if it was there.
redis.call('ZREM', HOSTS_SEEN, ARGV[1])
return redis.call('HDEL', HOSTS_INFO, ARGV[1])
