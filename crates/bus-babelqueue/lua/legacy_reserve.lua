-- KEYS: ready, processing, deadlines
-- ARGV: now (s), sweep batch, deadline score ('+inf' = never recover), max,
--       token prefix (24 hex characters, fresh per call)
-- Sweeps lapsed reservations first, then moves up to `max` heads onto :processing, each
-- with its own deadline member '<token>:<raw>' (token = prefix .. 8 hex digits).
-- Returns {token1, raw1, token2, raw2, ...}. Run twice (a client re-send), it reserves a
-- second batch; the unanswered one lapses and is swept back, never lost.
sweep(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]))
local out = {}
for i = 1, tonumber(ARGV[4]) do
    local raw = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
    if not raw then
        break
    end
    local token = ARGV[5] .. string.format('%08x', i)
    redis.call('zadd', KEYS[3], ARGV[3], token .. ':' .. raw)
    out[#out + 1] = token
    out[#out + 1] = raw
end
return out
