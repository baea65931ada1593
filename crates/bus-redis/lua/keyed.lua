-- Per-key ordering's helpers, prepended after common.lua to the scripts that take a
-- keyed message in or out of its key's order (see scripts.rs).

-- Per-key ordering (docs/redis-layout.md "Per-key ordering"). A keyed message
-- of an ordered queue waits in `<kq>:<key>` (a list, FIFO) until its key has a free slot;
-- `kready` (sorted set, key -> when it became ready) holds the keys that may start, served
-- oldest first (round robin); `kbusy` (hash) counts each key's messages in flight. Reserve
-- leases keyed messages after the call's fresh envelopes, their keys in the lease's `keys`
-- list (common.lua's "Leases"); one that leaves its lease other than by ack is stored, and
-- `kof` (hash) maps a stored keyed message's storage id to its key. A keyed message holds
-- its key's slot from its first reserve until it is acked or dead-lettered: retries,
-- recovery, release and absolution keep the slot, so later messages of the key wait for it.

-- Gives back one slot of each key in `keys` (a key listed twice gives back two): each key
-- becomes ready again if it has waiting messages, and idle consumers are woken. One HMGET
-- of the keys' counts and one write of them, one ZADD of the keys made ready: per key only
-- an LLEN. (Numbers go to Redis as strings formatted here, each once: Redis formats a Lua
-- number argument as a double, which costs more than the command.)
local function slots_freed(kbusy, kready, kq, ready, keys, now)
  local held, order, at = {}, {}, string.format('%d', now)
  for _, key in ipairs(keys) do
    if not held[key] then
      held[key] = 0
      order[#order + 1] = key
    end
    held[key] = held[key] + 1
  end
  if #order == 0 then return end
  local busy = bulk_read('HMGET', kbusy, order)
  local idle, still, woken = {}, {}, {}
  for i, key in ipairs(order) do
    -- (A count that is not a number is garbage: the arithmetic fails the call.)
    local left = (busy[i] == false and 0 or tonumber(busy[i])) - held[key]
    if left <= 0 then
      idle[#idle + 1] = key
    else
      still[#still + 1] = key
      still[#still + 1] = string.format('%d', left)
    end
    if redis.call('LLEN', kq .. ':' .. key) > 0 then
      woken[#woken + 1] = at
      woken[#woken + 1] = key
    end
  end
  bulk('HDEL', kbusy, idle)
  bulk('HSET', kbusy, still)
  for i = 1, #woken, 1000 do
    redis.call('ZADD', kready, 'NX', unpack(woken, i, math.min(i + 999, #woken)))
  end
  if #woken > 0 and redis.call('LLEN', ready) == 0 then redis.call('RPUSH', ready, WAKE) end
end

-- Gives back the slots the stored keyed messages among `ids` held (an unkeyed one holds
-- none; their keys are in `kof`, which forgets them): one HMGET and one HDEL for all.
local function keys_freed(kof, kbusy, kready, kq, ready, ids, now)
  if #ids == 0 then return end
  local keys = bulk_read('HMGET', kof, ids)
  local freed, slots, seen = {}, {}, {}
  for i = 1, #ids do
    local key = keys[i]
    if key and not seen[ids[i]] then
      seen[ids[i]] = true
      freed[#freed + 1] = ids[i]
      slots[#slots + 1] = key
    end
  end
  if #freed == 0 then return end
  bulk('HDEL', kof, freed)
  slots_freed(kbusy, kready, kq, ready, slots, now)
end

-- Whether a dead letter of this queue keeps its key's slot (the `flow` field `on_dead`
-- = `block`): later messages of the key then wait until an operator requeues or deletes it.
local function dead_letter_blocks(flow)
  return redis.call('HGET', flow, 'on_dead') == 'block'
end

-- Appends `envelopes` to the list of ordering key `key` on a queue ordered with `limit`
-- (> 0) per key (send_keyed.lua, send_once.lua, promotion): counted in the flow hash's
-- `keyed` field; the key becomes ready if it has a free slot, and idle consumers (blocked
-- on an empty `ready`) are woken.
local function join_key(ready, flow, kready, kbusy, kq, key, envelopes, limit, now)
  bulk('RPUSH', kq .. ':' .. key, envelopes)
  redis.call('HINCRBY', flow, 'keyed', #envelopes)
  if tonumber(redis.call('HGET', kbusy, key) or '0') < limit then
    redis.call('ZADD', kready, 'NX', now, key)
    if redis.call('LLEN', ready) == 0 then redis.call('RPUSH', ready, WAKE) end
  end
end

-- Promotes up to 100 due delayed messages (reserve.lua, send_keyed.lua): onto `ready`,
-- except a delayed keyed send (its id in `kdue`, written by send_keyed_at.lua) on a queue
-- still ordered, whose envelope joins its key's list now, as a keyed send at its due time
-- would: its place among its key's messages is its due time. A delayed retry of a keyed
-- message is no such send (its storage id is not in `kdue`): it goes onto `ready`,
-- still holding its key's slot. Unordered queues pay one EXISTS per promoting call.
local function promote_due(delayed, ready, msgs, kdue, flow, kready, kbusy, kq, now)
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 100)
  if #due == 0 then return end
  bulk('ZREM', delayed, due)
  if redis.call('EXISTS', kdue) == 0 then
    bulk('RPUSH', ready, due)
    return
  end
  local keys = bulk_read('HMGET', kdue, due)
  local plain, limit = {}, nil
  for i, id in ipairs(due) do
    local key = keys[i]
    if key then
      redis.call('HDEL', kdue, id)
      limit = limit or tonumber(redis.call('HGET', flow, 'per_key') or '0') or 0
    end
    local envelope = key and limit > 0 and redis.call('HGET', msgs, id)
    if envelope then
      redis.call('HDEL', msgs, id)
      join_key(ready, flow, kready, kbusy, kq, key, { envelope }, limit, now)
    else
      plain[#plain + 1] = id
    end
  end
  bulk('RPUSH', ready, plain)
end
