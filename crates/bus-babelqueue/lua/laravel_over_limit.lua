-- KEYS: the hash of reservations run past the limit (ours; SDKs never read it)
-- ARGV: the job as popped, its reserved member
-- A message whose stored attempts already reach the limit is run once more, as
-- BabelQueue's SDK workers run it. On Laravel a crash recovery moves the reserved member
-- (attempts + 1) back to ready, where it reads like any other message past the limit, so
-- the member of such a run is recorded here (field: its SHA-1) before it runs: when a
-- popped job is a recorded member, its run stopped mid-message (a crash?) and it is not
-- run again. Returns 1 (run it, recorded) or 0 (a recorded member came back: refuse it).
-- The hash expires KEEP seconds after its last write, a backstop for fields of runs that
-- were settled.
local KEEP = 604800
if #KEYS ~= 1 or #ARGV ~= 2 then
    return redis.error_reply('ERR laravel_over_limit: 1 key and 2 arguments expected')
end
if redis.call('hdel', KEYS[1], redis.sha1hex(ARGV[1])) == 1 then
    return 0
end
redis.call('hset', KEYS[1], redis.sha1hex(ARGV[2]), 1)
redis.call('expire', KEYS[1], KEEP)
return 1
