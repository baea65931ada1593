-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: run_signal expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 4 then error({ err = 'ERR bus: run_signal expects 4 ARGV (payload, keep_ms, outcome_prefix, outcome_keep_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 2, 4 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: run_signal expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local SIGNAL, WAITERS, DUE = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Sends a signal: the first payload is kept in SIGNAL for `keep_ms` (a later send changes
-- nothing), and every run in its WAITERS whose wait has no outcome yet gets it
-- (`<outcome prefix><token>` = 's' .. payload, kept `outcome_keep_ms`) and is due at once.
-- Returns {1 if this send stored the payload else 0, how many runs it woke}.
local fresh = redis.call('SET', SIGNAL, ARGV[1], 'NX', 'PX', ARGV[2])
local payload = redis.call('GET', SIGNAL)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000
local woken = 0
for _, token in ipairs(redis.call('SMEMBERS', WAITERS)) do
  local outcome = ARGV[3] .. token
  if redis.call('EXISTS', outcome) == 0 then
    redis.call('SET', outcome, 's' .. payload, 'PX', ARGV[4])
    redis.call('ZADD', DUE, 'XX', now, token)
    woken = woken + 1
  end
end
redis.call('DEL', WAITERS)
if fresh then return { 1, woken } end
return { 0, woken }
