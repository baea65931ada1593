-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: legacy_reserve expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 5 then error({ err = 'ERR bus: legacy_reserve expects 5 ARGV (now, batch, deadline, max, token_prefix), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2, 4 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: legacy_reserve expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, PROCESSING, DEADLINES, RECOVERIES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- KEYS: ready, processing, deadlines, recoveries
-- ARGV: now (s), sweep batch, deadline score ('+inf' = never recover), max,
--       token prefix (24 hex characters, fresh per call)
-- Sweeps lapsed reservations first, then moves up to `max` heads onto :processing, each
-- with its own deadline member '<token>:<raw>' (token = prefix .. 8 hex digits).
-- Returns {token1, raw1, recoveries1, token2, raw2, recoveries2, ...}, where recoveries
-- is how often a sweep put that element back (0 when none counted). Run twice (a client
-- re-send), it reserves a second batch; the unanswered one lapses and is swept back,
-- never lost.
sweep(READY, PROCESSING, DEADLINES, RECOVERIES, ARGV[1], tonumber(ARGV[2]))
-- Nothing to look up while no element has been recovered (the usual case).
local counted = redis.call('exists', RECOVERIES) == 1
local out = {}
for i = 1, tonumber(ARGV[4]) do
    local raw = redis.call('lmove', READY, PROCESSING, 'LEFT', 'RIGHT')
    if not raw then
        break
    end
    local token = ARGV[5] .. string.format('%08x', i)
    redis.call('zadd', DEADLINES, ARGV[3], token .. ':' .. raw)
    local recovered = 0
    if counted then
        recovered = tonumber(redis.call('hget', RECOVERIES, redis.sha1hex(raw))) or 0
    end
    out[#out + 1] = token
    out[#out + 1] = raw
    out[#out + 1] = recovered
end
return out
