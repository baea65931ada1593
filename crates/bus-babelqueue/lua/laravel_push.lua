-- KEYS: ready, notify; ARGV: jobs. Laravel's push, for a batch at once (all or none).
for i = 1, #ARGV do
    redis.call('rpush', KEYS[1], ARGV[i])
    redis.call('rpush', KEYS[2], 1)
end
return #ARGV
