-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: breaker_judge expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: breaker_judge expects 1 ARGV (outcome), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local FLOW = KEYS[1]
-- (end of the generated shape)
-- Judges the probe of a queue's fleet circuit breaker (docs/redis-layout.md, "Circuit
-- breakers"), called by whoever settled it, right after the settle: 'ok' (it was acked)
-- closes the breaker for every consumer; 'failed' (retried or dead-lettered) opens it
-- again for the cool-down it was last tripped for (`breaker_cool_ms`, 5 s if none was
-- kept), never shortening an open one, and frees the probe's slot.
-- ARGV: outcome ('ok' | 'failed'). Returns breaker_until (ms, Redis's clock), 0 once closed.
if ARGV[1] == 'ok' then
  redis.call('HDEL', FLOW, 'breaker_until', 'breaker_probe', 'breaker_cool_ms')
  return 0
end
if ARGV[1] ~= 'failed' then
  refuse('breaker_judge', string.format("expects 'ok' or 'failed' as ARGV[1], got %s", shown(1)))
end
local cool = tonumber(redis.call('HGET', FLOW, 'breaker_cool_ms')) or 5000
local until_ms = now_ms() + cool
local current = tonumber(redis.call('HGET', FLOW, 'breaker_until'))
if current and current > until_ms then
  until_ms = current
else
  redis.call('HSET', FLOW, 'breaker_until', until_ms)
end
redis.call('HDEL', FLOW, 'breaker_probe')
return until_ms
