-- Prepended to every script of the bus (see scripts.rs); defines shared helpers.
-- Times come from the Redis clock so that all consumers agree on deadlines.
local ERROR_HISTORY = 10
-- Pushed onto an empty ready list when a delayed message becomes the next one due, so
-- that consumers blocked on the list wake and wait for its due time instead.
local WAKE = '~wake'

-- Refuses the call with an error naming the script and the protocol. Only ever called
-- before a script's first write, so a refused call changes nothing.
local function refuse(script, problem)
  error({ err = string.format('ERR bus: %s %s (docs/wire-format.md, "The calls")', script,
    problem) })
end

-- ARGV[i] for an error message: quoted, cut short.
local function shown(i)
  local value = ARGV[i]
  if value == nil then return 'nothing' end
  return string.format('%q', string.sub(value, 1, 40))
end

-- True if `value` is a decimal integer (optional '-', digits).
local function is_integer(value)
  return value ~= nil and string.find(value, '^%-?%d+$') ~= nil
end

-- The shape check every script makes first, generated from its shape (bus-redis's
-- src/shape.rs): exactly `keys` KEYS (a negative number: at least that many; nil: not
-- checked here), `min` to `max` ARGV (nil: no maximum), and an integer at each position in
-- `integers`.
local function expect(script, keys, min, max, integers)
  if keys and keys >= 0 and #KEYS ~= keys then
    refuse(script, string.format('expects %d KEYS, got %d', keys, #KEYS))
  elseif keys and keys < 0 and #KEYS < -keys then
    refuse(script, string.format('expects at least %d KEYS, got %d', -keys, #KEYS))
  end
  if #ARGV < min or (max and #ARGV > max) then
    local wanted = (max == min and tostring(min))
      or (max and string.format('%d to %d', min, max))
      or string.format('at least %d', min)
    refuse(script, string.format('expects %s ARGV, got %d', wanted, #ARGV))
  end
  for _, i in ipairs(integers or {}) do
    if not is_integer(ARGV[i]) then
      refuse(script, string.format('expects an integer as ARGV[%d], got %s', i, shown(i)))
    end
  end
end

-- The rest of the shape check of a call that takes nothing but receipts (release, absolve):
-- `id, count` pairs (a leased message: `token, index`).
local function expect_receipts(script)
  if #ARGV % 2 == 1 then
    refuse(script, string.format('expects id, count pairs, got %d ARGV', #ARGV))
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Runs `cmd key item...` over a list in chunks (Lua's unpack has a stack limit).
local function bulk(cmd, key, items)
  for i = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- Runs a reading `cmd key item...` over a list in chunks and returns the replies of all
-- chunks as one list, in order (ZMSCORE, HMGET: one reply per item).
local function bulk_read(cmd, key, items)
  if #items <= 1000 then return redis.call(cmd, key, unpack(items)) end
  local out, n = {}, 0
  for i = 1, #items, 1000 do
    local part = redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
    for j = 1, #part do out[n + j] = part[j] end
    n = n + #part
  end
  return out
end

-- True if the first byte of a ready element shows it is an envelope as sent: a JSON
-- object ('{') or a MessagePack map (a byte >= 0x80). Stored ids never start so
-- (storage ids start with '~'; send_at refuses such message ids), so reserve needs no
-- lookup to tell such an element is fresh.
local function surely_fresh(element)
  local b = string.byte(element, 1)
  return b == 123 or (b ~= nil and b >= 128)
end

-- The envelope a ready element stands for (the "fresh envelope or storage id" test): a
-- fresh envelope is itself; any other element is a storage id when `msgs` holds it, and
-- is itself otherwise (reserve then stores it as a fresh envelope).
local function envelope_of(msgs, element)
  if surely_fresh(element) then return element end
  return redis.call('HGET', msgs, element) or element
end

-- The stray-reference rule: true if the stored message `id` is in flight, delayed or
-- dead. A ready element naming it is then a stray duplicate reference (pushed by hand or
-- by a foreign client): it must neither be delivered a second time nor, when purged,
-- delete what the other place holds. Used by reserve.lua and admin_purge.lua.
local function referenced_elsewhere(inflight, delayed, dead_info, id)
  return redis.call('ZSCORE', inflight, id) or redis.call('ZSCORE', delayed, id)
    or redis.call('HEXISTS', dead_info, id) == 1
end

-- True if `id` is reserved and `count` is its current delivery count: the reservation's
-- token. A stale consumer's transitions are ignored.
local function current(inflight, deliveries, id, count)
  return redis.call('ZSCORE', inflight, id) and redis.call('HGET', deliveries, id) == count
end

local function append_error(errors, id, message, now)
  if message == nil or message == '' then return end
  local raw = redis.call('HGET', errors, id)
  local list = raw and cjson.decode(raw) or {}
  list[#list + 1] = { message = message, at_ms = now }
  while #list > ERROR_HISTORY do table.remove(list, 1) end
  redis.call('HSET', errors, id, cjson.encode(list))
end

-- Moves an id (already out of every other structure) to the dead-letter list.
local function bury(errors, dead, dead_info, id, reason, message, now)
  append_error(errors, id, message, now)
  redis.call('RPUSH', dead, id)
  redis.call('HSET', dead_info, id, cjson.encode({ reason = reason, at_ms = now }))
end

-- Schedules ids at `due` (ms), each `step` ms after the one before (nil: all at once).
-- When they become the first due and the ready list is
-- empty, pushes the wake-up marker, so that an idle consumer blocked on the ready list
-- wakes and waits just until then (its wait was computed before this message existed).
local function schedule(delayed, ready, due, ids, step)
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  local items = {}
  for i, id in ipairs(ids) do
    items[#items + 1] = due + (i - 1) * (step or 0)
    items[#items + 1] = id
  end
  bulk('ZADD', delayed, items)
  if (#first == 0 or tonumber(first[2]) > due) and redis.call('LLEN', ready) == 0 then
    redis.call('RPUSH', ready, WAKE)
  end
end

-- Leases (docs/redis-layout.md): the fresh envelopes of one reservation, and the keyed
-- messages it took from their keys' lists after them, share one lock, `<leases>:<token>`
-- (a list) with `<leases>:<token>:done` (a bitmap: bit i, in SETBIT's order, is set once
-- message i left the lease) and
-- `<leases>:<token>:keys` (a list: the keys of the lease's last messages, in order, each
-- holding its key's slot until its message leaves; a list, not a hash, because a new
-- hash of hundreds of fields is a listpack that costs Redis a scan per field).
-- Reserve takes one storage id per fresh envelope from `seq`, as before, but writes none:
-- the token `~L<first>` names the lease and its range, and message `i` is `~<first + i>`
-- once stored. Storage ids are '~<digits>' and send_at refuses '~', so a key starting
-- '~L' is always a lease token.
local LEASE_MAX = 1000

-- True if `index` is a lease index as reserve hands it out: the exact decimal ("0", or no
-- leading zero) of an integer below LEASE_MAX. Any other spelling ("01", "3.0", "+3",
-- " 3", "-0", "-1") names no message: the receipt is stale (LINDEX and SETBIT would read
-- some of them as another index, or fail mid-script).
local function canonical_index(index)
  return index == '0' or string.find(index, '^[1-9]%d?%d?$') ~= nil
end

-- The bit of each position within a byte of a `done` bitmap: index i is bit BIT[i % 8 + 1]
-- of byte i // 8 (SETBIT's order, the high bit first).
local BIT = { 128, 64, 32, 16, 8, 4, 2, 1 }

-- Protocol 9 and before kept a lease's `done` as a set of index strings. A script that
-- writes a `done` first rewrites one of those, left by their consumers, as a bitmap (any
-- other type is garbage: the caller's next command on it fails).
local function done_bits(done)
  if redis.call('TYPE', done).ok ~= 'set' then return end
  local indices = redis.call('SMEMBERS', done)
  redis.call('DEL', done)
  for _, index in ipairs(indices) do
    if canonical_index(index) then redis.call('SETBIT', done, index, 1) end
  end
end

-- Which messages of a lease of `len` left it, read from its `done` of either protocol
-- without writing: settled[i + 1] for index i.
local function settled_indices(done, len)
  local settled = {}
  local kind = redis.call('TYPE', done).ok
  if kind == 'set' then
    for _, index in ipairs(redis.call('SMEMBERS', done)) do
      if canonical_index(index) then settled[tonumber(index) + 1] = true end
    end
  elseif kind == 'string' then
    local bits = redis.call('GET', done)
    for b = 1, math.min(#bits, math.ceil(len / 8)) do
      local x = string.byte(bits, b)
      if x ~= 0 then
        for j = 1, 8 do
          if bit.band(x, BIT[j]) ~= 0 then settled[(b - 1) * 8 + j] = true end
        end
      end
    end
  end
  return settled
end

-- Whether message `index` left a lease, from its `done` of either protocol, without
-- writing.
local function settled_at(done, index)
  if redis.call('TYPE', done).ok == 'set' then
    return redis.call('SISMEMBER', done, index) == 1
  end
  return redis.call('GETBIT', done, index) == 1
end

-- How many messages left a lease, from its `done` of either protocol, without writing.
local function settled_count(done)
  local kind = redis.call('TYPE', done).ok
  if kind == 'set' then return redis.call('SCARD', done) end
  if kind == 'string' then return redis.call('BITCOUNT', done) end
  return 0
end

local function is_lease(key)
  return string.sub(key, 1, 2) == '~L'
end

-- The storage id of message `index` of lease `token`.
local function leased_id(token, index)
  return string.format('~%d', tonumber(string.sub(token, 3)) + tonumber(index))
end

-- Counts `n` messages out of the leases; the counter goes when it reaches 0, as empty
-- structures do.
local function unleased(leased, n)
  if redis.call('DECRBY', leased, n) <= 0 then redis.call('DEL', leased) end
end

-- The key of message `index` (a number) of a lease of `len` messages whose keys list is
-- `keys`: nil for a message without one.
local function leased_key(keys, len, index)
  local at = index - (len - redis.call('LLEN', keys))
  if at < 0 then return nil end
  return redis.call('LINDEX', keys, at) or nil
end

-- Takes message `index` (a decimal string) out of lease `token` and returns its
-- envelope and, for a keyed message of an ordered queue, its key; nil when the receipt is
-- stale (lease recovered, index already settled, out of range or not spelled as reserve
-- hands it out). Deletes the lease with its last message.
local function unlease(leases, leased, holders, token, index)
  if not canonical_index(index) then return nil end
  local lease = leases .. ':' .. token
  local envelope = redis.call('LINDEX', lease, index)
  if not envelope then return nil end
  local done = lease .. ':done'
  done_bits(done)
  if redis.call('SETBIT', done, index, 1) == 1 then return nil end
  local len = redis.call('LLEN', lease)
  local key = leased_key(lease .. ':keys', len, tonumber(index))
  unleased(leased, 1)
  if redis.call('BITCOUNT', done) >= len then
    redis.call('DEL', lease, done, lease .. ':keys')
    redis.call('ZREM', leases, token)
    redis.call('HDEL', holders, token)
  end
  return envelope, key
end

-- Stores message `index` of lease `token`, leaving it other than by ack, under its storage
-- id with its one delivery written into `deliveries` (it was implicit; `deliveries` nil:
-- none, a release), and a keyed one's key in `kof`, so that it keeps its key's slot as a
-- stored keyed message does (keyed.lua). Returns the id.
local function store_leased(msgs, deliveries, kof, token, index, envelope, key)
  local id = leased_id(token, index)
  redis.call('HSET', msgs, id, envelope)
  if deliveries then redis.call('HSET', deliveries, id, '1') end
  if key then redis.call('HSET', kof, id, key) end
  return id
end

-- Takes a reserved message out of flight to retry or bury it: a leased one (`receipt` is
-- its index) is stored first with its one delivery; a stored one (`receipt` is its
-- count) must hold the current reservation. Returns its storage id, nil for a stale
-- receipt.
local function leave_flight(inflight, deliveries, isolated, msgs, leases, leased, holders, kof,
                            id, receipt)
  if is_lease(id) then
    local envelope, key = unlease(leases, leased, holders, id, receipt)
    if not envelope then return nil end
    return store_leased(msgs, deliveries, kof, id, receipt, envelope, key)
  end
  if not current(inflight, deliveries, id, receipt) then return nil end
  redis.call('ZREM', inflight, id)
  redis.call('SREM', isolated, id)
  redis.call('HDEL', holders, id)
  return id
end

-- Holders (docs/redis-layout.md, "Holders and presence"). Every lock records the consumer
-- that holds it, in `holders` (a lease's token or a stored message's id -> holder id), and
-- every consumer marks itself present on each recover and renew call: `seen` (sorted set,
-- holder -> its last call, Redis's clock) and `since` (hash, holder -> when its current
-- presence began: its first call after an absence longer than `dead_after` ms).

-- Marks `holder` present at `now`; returns when its current presence began.
local function mark_present(seen, since, holder, now, dead_after)
  local last = tonumber(redis.call('ZSCORE', seen, holder))
  local began = tonumber(redis.call('HGET', since, holder))
  if not (last and began) or now - last > dead_after then
    began = now
    redis.call('HSET', since, holder, now)
  end
  redis.call('ZADD', seen, now, holder)
  return began
end

-- What an expired lock's holder is: 'alive' (it called within `dead_after` ms: the lock
-- expired under a live holder, a stall or a pause, not a crash), 'gone' (silent for longer
-- while `judging`), or nil (not known yet). A lock with no holder recorded counts as gone.
-- `judging` is false while the caller itself has been present for less than `dead_after`:
-- after an absence of its own (a stall of every link, a paused Redis) the others' silence
-- says nothing until they have had the time to call again.
local function holder_state(holders, seen, lock, now, dead_after, judging)
  local holder = redis.call('HGET', holders, lock)
  if not holder then return 'gone' end
  local last = tonumber(redis.call('ZSCORE', seen, holder))
  if last and now - last <= dead_after then return 'alive' end
  if judging then return 'gone' end
  return nil
end

-- The checks and the store of a delayed send (send_at.lua, send_keyed_at.lua): ARGV from
-- `first` on are `id, envelope` pairs, due at `due` (ms). Returns the ids stored:
-- none when the batch was stored already (its first id is in `msgs`: a re-sent call).
local function store_delayed(script, delayed, msgs, ready, due, first)
  if (#ARGV - first + 1) % 2 == 1 then
    refuse(script, string.format('expects id, envelope pairs from ARGV[%d], got %d ARGV', first, #ARGV))
  end
  if #ARGV < first or redis.call('HEXISTS', msgs, ARGV[first]) == 1 then return {} end
  for i = first, #ARGV, 2 do
    -- Ids starting with '~' are the storage ids reserve hands out; reserve tells an
    -- envelope from a stored id by a first byte '{' or >= 0x80 (above).
    if string.sub(ARGV[i], 1, 1) == '~' or surely_fresh(ARGV[i]) then
      error({ err = 'message ids must not start with ~, { or a byte >= 0x80' })
    end
  end
  local fields, ids = {}, {}
  for i = first, #ARGV, 2 do
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = ARGV[i + 1]
    ids[#ids + 1] = ARGV[i]
  end
  bulk('HSET', msgs, fields)
  -- The i-th message of a batch is due i microseconds after the first, so that a batch
  -- is promoted in the order sent whatever its ids (equal scores would sort by id).
  schedule(delayed, ready, due, ids, 0.001)
  return ids
end
