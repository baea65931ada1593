-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: laravel_reserve expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 5 then error({ err = 'ERR bus: laravel_reserve expects 5 ARGV (now, batch, until, max, recover_reserved), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2, 4 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: laravel_reserve expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, RESERVED, NOTIFY, DELAYED = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- KEYS: ready, reserved, notify, delayed
-- ARGV: now (s), migrate batch, reserved-until score ('+inf' = never recover), max,
--       recover lapsed reservations (1/0)
-- Due delayed (and lapsed reserved) members move to ready first; then up to `max` times
-- Laravel's pop: the reserved member is the job with attempts + 1 (Lua cjson's
-- re-encoding); a job that does not decode or has no numeric attempts is reserved raw.
-- Returns {next delayed due score or -1, job1, reserved1, job2, reserved2, ...}.
migrate(DELAYED, READY, NOTIFY, ARGV[1], tonumber(ARGV[2]))
if ARGV[5] == '1' then
    migrate(RESERVED, READY, NOTIFY, ARGV[1], tonumber(ARGV[2]))
end
local out = {-1}
for i = 1, tonumber(ARGV[4]) do
    local job = redis.call('lpop', READY)
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
    redis.call('zadd', RESERVED, ARGV[3], reserved)
    redis.call('lpop', NOTIFY)
    out[#out + 1] = job
    out[#out + 1] = reserved
end
if #out == 1 then
    local first = redis.call('zrange', DELAYED, 0, 0, 'WITHSCORES')
    if first[2] then
        out[1] = tonumber(first[2])
    end
end
return out
