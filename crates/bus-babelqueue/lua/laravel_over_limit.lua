-- KEYS: the hash of last runs (ours; SDKs never read it)
-- ARGV: pairs of the job as popped and its reserved member
-- A message's last run (its delivery count at the limit; with stored attempts at or past
-- the limit it runs once more, as BabelQueue's SDK workers run it). On Laravel a crash
-- recovery moves the reserved member (attempts + 1) back to ready, where it reads like
-- any message past the limit, so the member of each last run is recorded here (field:
-- its SHA-1) before it runs: a popped job that is a recorded member is a last run that
-- stopped mid-message (a crash?) and does not run again. Returns per pair 1 (run it,
-- recorded) or 0 (a recorded member came back: refuse it). The hash expires KEEP seconds
-- after its last write, a backstop for fields of runs that were settled.
local KEEP = 604800
if #KEYS ~= 1 or #ARGV == 0 or #ARGV % 2 ~= 0 then
    return redis.error_reply('ERR laravel_over_limit: 1 key and pairs of job, member expected')
end
local out = {}
for i = 1, #ARGV, 2 do
    if redis.call('hdel', KEYS[1], redis.sha1hex(ARGV[i])) == 1 then
        out[#out + 1] = 0
    else
        redis.call('hset', KEYS[1], redis.sha1hex(ARGV[i + 1]), 1)
        out[#out + 1] = 1
    end
end
redis.call('expire', KEYS[1], KEEP)
return out
