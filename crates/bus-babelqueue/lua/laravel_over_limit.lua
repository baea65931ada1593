-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 1 then error({ err = 'ERR bus: laravel_over_limit expects 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: laravel_over_limit expects at least 1 ARGV (mode), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local OVER_LIMIT = KEYS[1]
-- (end of the generated shape)
-- KEYS: the hash of last runs (ours; SDKs never read it)
-- ARGV: 'mark', then pairs of the job as popped and its reserved member; or 'forget',
-- then reserved members
-- A message's last run (its delivery count at the limit; with stored attempts at or past
-- the limit it runs once more, as BabelQueue's SDK workers run it). On Laravel a crash
-- recovery moves the reserved member (attempts + 1) back to ready, where it reads like
-- any message past the limit, so the member of each last run is recorded here (field:
-- its SHA-1) before it runs: a popped job that is a recorded member is a last run that
-- stopped mid-message (a crash?) and does not run again.
-- 'mark' returns per pair 1 (run it, recorded) or 0 (a recorded member came back:
-- refuse it). 'forget' removes the fields of last runs that were settled (acked,
-- dead-lettered, released) and returns how many it removed. The hash expires KEEP
-- seconds after its last mark, a backstop for fields nobody forgot.
local KEEP = 604800
local mode = ARGV[1]
if #KEYS ~= 1 or not ((mode == 'mark' and #ARGV >= 3 and #ARGV % 2 == 1)
    or (mode == 'forget' and #ARGV >= 2)) then
    return redis.error_reply("ERR laravel_over_limit: 1 key, then 'mark' and pairs of job, member, or 'forget' and members")
end
if mode == 'forget' then
    local removed = 0
    for i = 2, #ARGV, 1000 do
        local fields = {}
        for j = i, math.min(i + 999, #ARGV) do
            fields[#fields + 1] = redis.sha1hex(ARGV[j])
        end
        removed = removed + redis.call('hdel', KEYS[1], unpack(fields))
    end
    return removed
end
local out = {}
for i = 2, #ARGV, 2 do
    if redis.call('hdel', KEYS[1], redis.sha1hex(ARGV[i])) == 1 then
        out[#out + 1] = 0
    else
        redis.call('hset', KEYS[1], redis.sha1hex(ARGV[i + 1]), 1)
        out[#out + 1] = 1
    end
end
redis.call('expire', KEYS[1], KEEP)
return out
