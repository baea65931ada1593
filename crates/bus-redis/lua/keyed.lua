-- Per-key ordering's helpers, prepended after common.lua to the scripts that take a
-- keyed message in or out of its key's order (see scripts.rs).

-- Per-key ordering (docs/redis-layout.md "Per-key ordering"). A keyed message
-- of an ordered queue waits in `<kq>:<key>` (a list, FIFO) until its key has a free slot;
-- then it moves onto `kheads` (a list of key, envelope pairs: the heads that may start,
-- oldest first, so keys take turns), holding a slot, and reserve pops heads n at a time as
-- it pops `ready`. `kbusy` (hash) counts each key's slots taken: its messages on `kheads`
-- and in flight. Reserve leases keyed messages after the call's fresh envelopes, their
-- keys in the lease's `keys` list (common.lua's "Leases"); one that leaves its lease
-- other than by ack is stored, and `kof` (hash) maps a stored keyed message's storage id
-- to its key. A keyed message holds its key's slot from the moment it becomes a head
-- until it is acked or dead-lettered: retries, recovery, release and absolution keep the
-- slot, so later messages of the key wait for it.

-- The keys of `keys` in order of first listing, and how many times each is listed.
-- (Appends count their table's length: `#t` is a search in Lua 5.1.)
local function tally(keys)
  local order, held, n = {}, {}, 0
  for _, key in ipairs(keys) do
    if not held[key] then
      held[key] = 0
      n = n + 1
      order[n] = key
    end
    held[key] = held[key] + 1
  end
  return order, held
end

-- Writes the slots each key of `order` has taken (`taken`, by key) into `kbusy`, in one
-- HDEL of the keys at 0 and one HSET of the others. (Numbers go to Redis as strings
-- formatted here, each once: Redis formats a Lua number argument as a double, which costs
-- more than the command.)
local function write_busy(kbusy, order, taken)
  local idle, still = {}, {}
  for _, key in ipairs(order) do
    if taken[key] <= 0 then
      idle[#idle + 1] = key
    else
      still[#still + 1] = key
      still[#still + 1] = string.format('%d', taken[key])
    end
  end
  bulk('HDEL', kbusy, idle)
  bulk('HSET', kbusy, still)
end

-- The slots each key of `order` has taken, less its count in `held`. (A count that is
-- not a number is garbage: the arithmetic fails the call.)
local function busy_less(kbusy, order, held)
  local busy, left = bulk_read('HMGET', kbusy, order), {}
  for i, key in ipairs(order) do
    left[key] = (busy[i] == false and 0 or tonumber(busy[i])) - held[key]
  end
  return left
end

-- Gives back one slot of each key in `keys` (a key listed twice gives back two), without
-- passing it on: for a head that leaves `kheads` other than by reserve (a purge, a key
-- over its rate).
local function slots_released(kbusy, keys)
  local order, held = tally(keys)
  if #order > 0 then write_busy(kbusy, order, busy_less(kbusy, order, held)) end
end

-- Makes up to `n` of `key`'s waiting messages heads: pops them from its list onto the end
-- of `heads` (key, envelope pairs, `nh` long) and returns how many, and the new length.
-- Without a count for one (a Lua number argument is formatted as a double). A list that is
-- not a list is garbage: nothing moves, and the caller goes on, so that no other key
-- stays blocked.
local function pop_heads(kq, key, n, heads, nh)
  local list = kq .. ':' .. key
  if n == 1 then
    local ok, envelope = pcall(redis.call, 'LPOP', list)
    if not (ok and envelope) then return 0, nh end
    heads[nh + 1], heads[nh + 2] = key, envelope
    return 1, nh + 2
  end
  local ok, next = pcall(redis.call, 'LPOP', list, string.format('%d', n))
  if not (ok and next) then return 0, nh end
  for _, envelope in ipairs(next) do
    heads[nh + 1], heads[nh + 2], nh = key, envelope, nh + 2
  end
  return #next, nh
end

-- Gives back one slot of each key in `keys` (a key listed twice gives back two): each
-- freed slot passes to the next message waiting in the key's list, which becomes a head,
-- and idle consumers are woken. Per key one LPOP; one RPUSH of the new heads; only the
-- keys that passed on fewer slots than they freed have their counts read (one HMGET) and
-- written (a slot passed on leaves the count as it was). A freed slot moves at most one
-- message, so a key keeps the concurrency its limit gave when its messages became heads.
local function slots_freed(kbusy, kheads, kq, ready, keys)
  local order, held = tally(keys)
  local heads, fewer, unpassed, nh = {}, {}, {}, 0
  for _, key in ipairs(order) do
    local moved
    moved, nh = pop_heads(kq, key, held[key], heads, nh)
    if moved < held[key] then
      fewer[#fewer + 1] = key
      unpassed[key] = held[key] - moved
    end
  end
  bulk('RPUSH', kheads, heads)
  if #fewer > 0 then write_busy(kbusy, fewer, busy_less(kbusy, fewer, unpassed)) end
  if nh > 0 and redis.call('LLEN', ready) == 0 then redis.call('RPUSH', ready, WAKE) end
end

-- Each key of `keys` (listed once each) whose slots are not all taken passes its free
-- ones to the messages waiting in its list (a key back from its rate window, a key
-- protocol 7 left ready); `limit` as slots_freed's callers' queue has it.
local function keys_woken(kbusy, kheads, kq, keys, limit)
  if #keys == 0 then return end
  local busy, heads, taken, nh = bulk_read('HMGET', kbusy, keys), {}, {}, 0
  for i, key in ipairs(keys) do
    local n, moved = busy[i] == false and 0 or tonumber(busy[i]), 0
    if n < limit then moved, nh = pop_heads(kq, key, limit - n, heads, nh) end
    taken[key] = n + moved
  end
  write_busy(kbusy, keys, taken)
  bulk('RPUSH', kheads, heads)
end

-- Gives back the slots the stored keyed messages among `ids` held (an unkeyed one holds
-- none; their keys are in `kof`, which forgets them): one HMGET and one HDEL for all.
local function keys_freed(kof, kbusy, kheads, kq, ready, ids)
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
  slots_freed(kbusy, kheads, kq, ready, slots)
end

-- Whether a dead letter of this queue keeps its key's slot (the `flow` field `on_dead`
-- = `block`): later messages of the key then wait until an operator requeues or deletes it.
local function dead_letter_blocks(flow)
  return redis.call('HGET', flow, 'on_dead') == 'block'
end

-- Appends `envelopes` to the messages of ordering key `key` on a queue ordered with
-- `limit` (> 0) per key (send_keyed.lua, send_once.lua, promotion), counted in the flow
-- hash's `keyed` field: while the key has free slots and no message waits in its list,
-- they become heads (idle consumers, blocked on an empty `ready`, are woken); the rest
-- wait in the key's list.
local function join_key(ready, flow, kheads, kbusy, kq, key, envelopes, limit)
  redis.call('HINCRBY', flow, 'keyed', #envelopes)
  local list = kq .. ':' .. key
  local busy = tonumber(redis.call('HGET', kbusy, key) or '0')
  local free = 0
  if busy < limit and redis.call('LLEN', list) == 0 then
    free = math.min(limit - busy, #envelopes)
    local heads = {}
    for i = 1, free do
      heads[#heads + 1] = key
      heads[#heads + 1] = envelopes[i]
    end
    bulk('RPUSH', kheads, heads)
    redis.call('HSET', kbusy, key, string.format('%d', busy + free))
    if redis.call('LLEN', ready) == 0 then redis.call('RPUSH', ready, WAKE) end
  end
  if free == 0 then
    bulk('RPUSH', list, envelopes)
  elseif free < #envelopes then
    local rest = {}
    for i = free + 1, #envelopes do rest[#rest + 1] = envelopes[i] end
    bulk('RPUSH', list, rest)
  end
end

-- Promotes up to 100 due delayed messages (reserve.lua, send_keyed.lua): onto `ready`,
-- except a delayed keyed send (its id in `kdue`, written by send_keyed_at.lua) on a queue
-- still ordered, whose envelope joins its key's list now, as a keyed send at its due time
-- would: its place among its key's messages is its due time. A delayed retry of a keyed
-- message is no such send (its storage id is not in `kdue`): it goes onto `ready`,
-- still holding its key's slot. Unordered queues pay one EXISTS per promoting call.
local function promote_due(delayed, ready, msgs, kdue, flow, kheads, kbusy, kq, now)
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
      join_key(ready, flow, kheads, kbusy, kq, key, { envelope }, limit)
    else
      plain[#plain + 1] = id
    end
  end
  bulk('RPUSH', ready, plain)
end
