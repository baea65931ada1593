-- Reserve alone: the next recovered message, for a consumer that holds nothing else, so
-- that a message that crashed its consumer is charged only its own deliveries.
-- KEYS: suspects, msgs, deliveries, inflight, isolated, leased, flow, flow-starts.
-- ARGV: lock_ms.
-- Returns { pending, id, count, envelope } (pending: suspects still waiting), or { 0 },
-- or { 2 | 3 | 4 | 5 } when flow control holds the call back (as reserve.lua's `pending`).
-- Protocol 4: a 5th element, 6, marks the message as a fleet circuit breaker's probe.
expect('reserve_alone', 8, 1, 1, { 1 })
local now = now_ms()
local _, held, _, window, _, probe = flow_allowance(KEYS[7], KEYS[8], KEYS[4], KEYS[6], 1, now)
if held > 0 then return { held } end
local deadline = now + tonumber(ARGV[1])
-- Bounded: stray references are skipped, at most 100 per call.
for _ = 1, 100 do
  local id = redis.call('LPOP', KEYS[1])
  if not id then return { 0 } end
  local envelope = redis.call('HGET', KEYS[2], id)
  if envelope and not redis.call('ZSCORE', KEYS[4], id) then
    local count = redis.call('HINCRBY', KEYS[3], id, 1)
    redis.call('ZADD', KEYS[4], deadline, id)
    redis.call('SADD', KEYS[5], id)
    flow_started(KEYS[7], KEYS[8], window, 1, now)
    local out = { redis.call('LLEN', KEYS[1]) > 0 and 1 or 0, id, count, envelope }
    if probe then out[5] = flow_probe_taken(KEYS[7], 1, now, deadline - now) end
    return out
  end
end
return { 1 }
