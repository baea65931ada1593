-- Reserve: promote due delayed messages, then move up to N ready elements into flight,
-- each with a lock deadline and an incremented delivery count.
-- KEYS: ready, msgs, deliveries, inflight, delayed, seq, dead-info, suspects.
-- ARGV: max, lock_ms.
-- Returns { wait_ms, pending, id, count, envelope, ... }. wait_ms: when nothing was
-- reserved, the time until the next delayed message is due (-1: none scheduled).
-- pending = 1: recovered messages wait to be delivered alone (reserve_alone.lua); then
-- nothing is reserved here, so that they are not regrouped with others.
--
-- A ready element is either a fresh envelope (as sent), the id of a stored message
-- (retried, recovered, released or promoted), or the wake-up marker that a delayed
-- message pushes for idle consumers (skipped). A fresh envelope gets an id from `seq`
-- and is stored in `msgs` now, so a queued message costs only its list element.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
if #due > 0 then
  bulk('RPUSH', KEYS[1], due)
  bulk('ZREM', KEYS[5], due)
end
if redis.call('LLEN', KEYS[8]) > 0 then return { -1, 1 } end
local out = { -1, 0 }
local elements = redis.call('LPOP', KEYS[1], tonumber(ARGV[1])) or {}
-- First pass: which elements are fresh envelopes (so their ids come from one INCRBY).
local known, fresh = {}, 0
for i, element in ipairs(elements) do
  if element ~= WAKE then
    known[i] = redis.call('HGET', KEYS[2], element)
    if not known[i] then fresh = fresh + 1 end
  end
end
local next_id = fresh > 0 and redis.call('INCRBY', KEYS[6], fresh) - fresh or 0
local deadline = now + tonumber(ARGV[2])
local new_envelopes, new_counts, locks, taken = {}, {}, {}, {}
for i, element in ipairs(elements) do
  local id, count, envelope = element, nil, known[i]
  if element == WAKE then
    -- Only woke us: the wait hint below says when the delayed message is due.
  elseif not envelope then
    next_id = next_id + 1
    id, count, envelope = '~' .. next_id, 1, element
    new_envelopes[#new_envelopes + 1] = id
    new_envelopes[#new_envelopes + 1] = envelope
    new_counts[#new_counts + 1] = id
    new_counts[#new_counts + 1] = 1
  elseif taken[id] or redis.call('ZSCORE', KEYS[4], id) or redis.call('ZSCORE', KEYS[5], id)
      or redis.call('HEXISTS', KEYS[7], id) == 1 then
    -- A stray reference to a message that is in flight (reserved earlier or in this
    -- very call), delayed or dead (a duplicate pushed by hand): skipped, so no message
    -- is ever in two places.
  else
    count = redis.call('HINCRBY', KEYS[3], id, 1)
  end
  if count then
    taken[id] = true
    out[#out + 1] = id
    out[#out + 1] = count
    out[#out + 1] = envelope
    locks[#locks + 1] = deadline
    locks[#locks + 1] = id
  end
end
bulk('HSET', KEYS[2], new_envelopes)
bulk('HSET', KEYS[3], new_counts)
bulk('ZADD', KEYS[4], locks)
if #out == 2 then
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if #first > 0 then out[1] = math.max(0, tonumber(first[2]) - now) end
end
return out
