-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 9 then error({ err = 'ERR bus: reserve_alone expects 9 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: reserve_alone expects 2 ARGV (lock_ms, holder), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: reserve_alone expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local SUSPECTS, MSGS, DELIVERIES, INFLIGHT, ISOLATED, LEASED, FLOW, FLOW_STARTS, HOLDERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
-- (end of the generated shape)
-- Reserve alone: the next recovered message, for a consumer that holds nothing else, so
-- that a message that crashed its consumer is charged only its own deliveries.
-- ARGV: lock_ms, holder (the reserving consumer's id, recorded as the lock's holder).
-- Returns { pending, id, count, envelope } (pending: suspects still waiting), or { 0 },
-- or { 2 | 3 | 4 | 5 } when flow control holds the call back (as reserve.lua's `pending`).
-- A 5th element, 6, marks the message as a fleet circuit breaker's probe.
local now = now_ms()
local _, held, _, window, _, probe = flow_allowance(FLOW, FLOW_STARTS, INFLIGHT, LEASED, 1, 1, now)
if held > 0 then return { held } end
local deadline = now + tonumber(ARGV[1])
-- Bounded: stray references are skipped, at most 100 per call.
for _ = 1, 100 do
  local id = redis.call('LPOP', SUSPECTS)
  if not id then return { 0 } end
  local envelope = redis.call('HGET', MSGS, id)
  if envelope and not redis.call('ZSCORE', INFLIGHT, id) then
    local count = redis.call('HINCRBY', DELIVERIES, id, 1)
    redis.call('ZADD', INFLIGHT, deadline, id)
    redis.call('SADD', ISOLATED, id)
    redis.call('HSET', HOLDERS, id, ARGV[2])
    flow_started(FLOW, FLOW_STARTS, window, 1, now)
    local out = { redis.call('LLEN', SUSPECTS) > 0 and PENDING_SUSPECTS or 0, id, count, envelope }
    if probe then out[5] = flow_probe_taken(FLOW, 1, now, deadline - now) end
    return out
  end
end
return { PENDING_SUSPECTS }
