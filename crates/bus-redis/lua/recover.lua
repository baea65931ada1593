-- Recover: messages whose lock expired, counting the lost delivery. One that was held
-- alone (reserve_alone.lua) failed by itself: at the delivery limit it is dead-lettered,
-- else it waits to run alone again. One held with others goes to `suspects`, to be
-- delivered alone, so that a crasher never takes its batch-mates down.
-- An expired lease is expanded whole into stored messages (their one delivery written
-- into `deliveries`), which all go to `suspects`. Bounded per call: `batch` locks of
-- stored messages, then leases until LEASE_MAX messages are passed.
-- KEYS: inflight, deliveries, errors, suspects, dead, dead-info, isolated, msgs, leases,
-- leased, flow, kof, kbusy, kready, kq, ready (protocol 4: a keyed message keeps its key's
-- slot through recovery, so later messages of its key wait for it; one dead-lettered here
-- gives it back as dead_letter.lua does).
-- ARGV: delivery_limit, batch, error.
expect('recover', 16, 3, 3, { 1, 2 })
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local limit = tonumber(ARGV[1])
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local alone = redis.call('SREM', KEYS[7], id) == 1
  if alone and tonumber(redis.call('HGET', KEYS[2], id) or '0') >= limit then
    bury(KEYS[3], KEYS[5], KEYS[6], id, 'delivery_limit', ARGV[3], now)
    if not dead_letter_blocks(KEYS[11]) then
      keys_freed(KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], { id }, now)
    end
  else
    append_error(KEYS[3], id, ARGV[3], now)
    redis.call('RPUSH', KEYS[4], id)
  end
end
local recovered = #expired
-- A new storage id has no error history yet: the lost lock is its first error.
local lost = ARGV[3] ~= '' and cjson.encode({ { message = ARGV[3], at_ms = now } })
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now, 'LIMIT', 0, 10)) do
  if recovered >= LEASE_MAX then break end
  local lease = KEYS[9] .. ':' .. token
  local done = lease .. ':done'
  local settled = {}
  for _, index in ipairs(redis.call('SMEMBERS', done)) do settled[tonumber(index) + 1] = true end
  local first = tonumber(string.sub(token, 3))
  local stored, counts, errors, ids = {}, {}, {}, {}
  for i, envelope in ipairs(redis.call('LRANGE', lease, 0, -1)) do
    if not settled[i] then
      local j, id = #ids + 1, string.format('~%d', first + i - 1)
      ids[j] = id
      stored[2 * j - 1], stored[2 * j] = id, envelope
      counts[2 * j - 1], counts[2 * j] = id, '1'
      errors[2 * j - 1], errors[2 * j] = id, lost
    end
  end
  local k = #ids
  if k > 0 then
    bulk('HSET', KEYS[8], stored)
    bulk('HSET', KEYS[2], counts)
    if lost then bulk('HSET', KEYS[3], errors) end
    bulk('RPUSH', KEYS[4], ids)
    unleased(KEYS[10], k)
  end
  redis.call('DEL', lease, done)
  redis.call('ZREM', KEYS[9], token)
  recovered = recovered + k
end
return recovered
