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
local elements = redis.call('LPOP', KEYS[1], tonumber(ARGV[1])) or {}
local n = #elements
-- First pass: which elements are fresh envelopes (so their ids come from one INCRBY).
-- Most are told by their first byte; only the others cost a lookup (HGET msgs).
local known, fresh = {}, 0
for i = 1, n do
  local element = elements[i]
  if surely_fresh(element) then
    fresh = fresh + 1
  elseif element ~= WAKE then
    known[i] = redis.call('HGET', KEYS[2], element)
    if not known[i] then fresh = fresh + 1 end
  end
end
local next_id = fresh > 0 and redis.call('INCRBY', KEYS[6], fresh) - fresh or 0
-- Strings, formatted once: Lua numbers passed to Redis are formatted per call (%.17g).
local deadline = tostring(now + tonumber(ARGV[2]))
local out, o = { -1, 0 }, 2
local new_envelopes, new_counts, locks, taken = {}, {}, {}, {}
local e, l = 0, 0
for i = 1, n do
  local element = elements[i]
  local id, count, envelope = element, nil, known[i]
  if envelope then
    if taken[id] or redis.call('ZSCORE', KEYS[4], id) or redis.call('ZSCORE', KEYS[5], id)
        or redis.call('HEXISTS', KEYS[7], id) == 1 then
      -- A stray reference to a message that is in flight (reserved earlier or in this
      -- very call), delayed or dead (a duplicate pushed by hand): skipped, so no message
      -- is ever in two places.
    else
      count = redis.call('HINCRBY', KEYS[3], id, 1)
    end
  elseif element ~= WAKE then
    -- (The wake-up marker only woke us: the wait hint below says when the delayed
    -- message is due.)
    next_id = next_id + 1
    -- '%d' formats an integer; `'~' .. n` would take Lua's float path (%.14g), 2.5x slower.
    id, count, envelope = string.format('~%d', next_id), 1, element
    new_envelopes[e + 1] = id
    new_envelopes[e + 2] = envelope
    new_counts[e + 1] = id
    new_counts[e + 2] = '1'
    e = e + 2
  end
  if count then
    -- (A fresh id is new: only stored ids can repeat within one call.)
    if envelope == known[i] then taken[id] = true end
    out[o + 1] = id
    out[o + 2] = count
    out[o + 3] = envelope
    o = o + 3
    locks[l + 1] = deadline
    locks[l + 2] = id
    l = l + 2
  end
end
bulk('HSET', KEYS[2], new_envelopes)
bulk('HSET', KEYS[3], new_counts)
bulk('ZADD', KEYS[4], locks)
if o == 2 then
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if #first > 0 then out[1] = math.max(0, tonumber(first[2]) - now) end
end
return out
