-- Reserve: promote due delayed messages, then move up to N ready ids into flight, each
-- with a lock deadline and an incremented delivery count.
-- KEYS: ready, msgs, deliveries, inflight, delayed, seq.  ARGV: max, lock_ms.
-- Returns { wait_ms, id, count, envelope, ... }; wait_ms is the time until the next
-- delayed message is due when nothing was ready (-1: none scheduled).
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
if #due > 0 then
  bulk('RPUSH', KEYS[1], due)
  bulk('ZREM', KEYS[5], due)
end
local out = { -1 }
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if #first > 0 then out[1] = math.max(0, tonumber(first[2]) - now) end
  return out
end
local deadline = now + tonumber(ARGV[2])
local locks = {}
for _, id in ipairs(ids) do
  local envelope = redis.call('HGET', KEYS[2], id)
  if not envelope then
    -- A foreign element (a plain envelope, or garbage): keep it as the envelope of a
    -- fresh id, so it is processed or dead-lettered like any other message.
    envelope = id
    id = '~' .. redis.call('INCR', KEYS[6])
    redis.call('HSET', KEYS[2], id, envelope)
  end
  out[#out + 1] = id
  out[#out + 1] = redis.call('HINCRBY', KEYS[3], id, 1)
  out[#out + 1] = envelope
  locks[#locks + 1] = deadline
  locks[#locks + 1] = id
end
bulk('ZADD', KEYS[4], locks)
return out
