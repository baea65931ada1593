-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: run_relayed expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local DUE, RUNS, ENVS = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Forgets parked runs whose resumed message was stored (ARGV: their tokens).
for i = 1, #ARGV do
  redis.call('ZREM', DUE, ARGV[i])
  redis.call('HDEL', RUNS, ARGV[i])
  redis.call('HDEL', ENVS, ARGV[i])
end
return #ARGV
