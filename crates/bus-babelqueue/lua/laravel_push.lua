-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: laravel_push expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local READY, NOTIFY = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- KEYS: ready, notify; ARGV: jobs. Laravel's push, for a batch at once (all or none).
for i = 1, #ARGV do
    redis.call('rpush', READY, ARGV[i])
    redis.call('rpush', NOTIFY, 1)
end
return #ARGV
