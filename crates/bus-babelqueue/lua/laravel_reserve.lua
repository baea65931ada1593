-- KEYS: ready, reserved, notify, delayed
-- ARGV: now (s), migrate batch, reserved-until score ('+inf' = never recover), max,
--       recover lapsed reservations (1/0)
-- Due delayed (and lapsed reserved) members move to ready first; then up to `max` times
-- Laravel's pop: the reserved member is the job with attempts + 1 (Lua cjson's
-- re-encoding); a job that does not decode or has no numeric attempts is reserved raw.
-- Returns {next delayed due score or -1, job1, reserved1, job2, reserved2, ...}.
migrate(KEYS[4], KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[2]))
if ARGV[5] == '1' then
    migrate(KEYS[2], KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[2]))
end
local out = {-1}
for i = 1, tonumber(ARGV[4]) do
    local job = redis.call('lpop', KEYS[1])
    if not job then
        break
    end
    local reserved = job
    local ok, decoded = pcall(cjson.decode, job)
    if ok and type(decoded) == 'table' and type(decoded['attempts']) == 'number' then
        decoded['attempts'] = decoded['attempts'] + 1
        local eok, encoded = pcall(cjson.encode, decoded)
        if eok then
            reserved = encoded
        end
    end
    redis.call('zadd', KEYS[2], ARGV[3], reserved)
    redis.call('lpop', KEYS[3])
    out[#out + 1] = job
    out[#out + 1] = reserved
end
if #out == 1 then
    local first = redis.call('zrange', KEYS[4], 0, 0, 'WITHSCORES')
    if first[2] then
        out[1] = tonumber(first[2])
    end
end
return out
