-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 20 then error({ err = 'ERR bus: reserve expects 20 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 4 then error({ err = 'ERR bus: reserve expects 4 ARGV (max, lock_ms, holder, start_now), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2, 4 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: reserve expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local READY, MSGS, DELIVERIES, INFLIGHT, DELAYED, SEQ, DEAD_INFO, SUSPECTS, LEASES, LEASED, FLOW, FLOW_STARTS, KHEADS, KBUSY, KQ, KDUE, KWAIT, KSTARTS, HOLDERS, KREADY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20]
-- (end of the generated shape)
-- Reserve: promote due delayed messages, then move up to N ready elements into flight.
-- ARGV: max (at most LEASE_MAX taken), lock_ms, holder (the reserving consumer's id: every
-- lock taken records it in `holders`, common.lua's "Holders"), start_now (how many of them
-- the consumer would start at once: all a queue under a rate limit gives; flow.lua).
-- Returns { wait_ms, pending, token, envelopes, position, id, count, envelope, ... }.
-- wait_ms: when nothing was reserved, the time until the next delayed message is due
-- (-1: none scheduled). pending = 1: recovered messages wait to be delivered alone
-- (reserve_alone.lua); then nothing is reserved here, so that they are not regrouped.
-- pending = 2, 3, 4: flow control held the call back (paused, the
-- concurrency limit is reached, the rate limit's window is full; flow.lua), and the
-- reply is just { wait_ms, pending }: for 4, wait_ms is when the window frees a start.
-- pending = 5: a fleet circuit breaker is open, wait_ms until the next probe;
-- pending = 6: its cool-down is over and the reply's one message (if any) is the probe.
-- `envelopes`: the fresh envelopes, leased together under `token` (false: none) at
-- indices 0, 1, ..., each with the implicit delivery count 1. Each stored message follows
-- as a quadruple with its position among all the reply's deliveries (0-based), so that
-- the reply keeps the ready list's order.
--
-- A ready element is either a fresh envelope (as sent), the id of a stored message
-- (retried, recovered, released or promoted), or the wake-up marker that a delayed
-- message pushes for idle consumers (skipped). Fresh envelopes go into one lease; a
-- stored message (and a foreign element, stored on the spot) gets its own lock in
-- `inflight` and its count incremented in `deliveries`.
--
-- An ordered queue (`per_key` in `flow`) also serves the heads of its keys on `kheads`
-- (keyed.lua; take_keyed below), with up to half the call's allowance while `ready`
-- holds messages too, so that neither side starves the other. Keyed messages join the
-- call's lease after its fresh envelopes (so they follow the ready part in the reply),
-- their keys in the lease's `keys` list. With a per-key rate (`key_rate` per
-- `key_per_ms` in `flow`), a key whose window is full waits in `kwait` until a start
-- leaves it, and the wait hint covers it (a consumer that took nothing waits until then,
-- no polling).
local now = now_ms()
promote_due(DELAYED, READY, MSGS, KDUE, FLOW, KHEADS, KBUSY, KQ, now)
local want, held, flow_wait, window, per_key, probe =
  flow_allowance(FLOW, FLOW_STARTS, INFLIGHT, LEASED, math.min(tonumber(ARGV[1]), LEASE_MAX),
    tonumber(ARGV[4]), now)
if held > 0 then return { flow_wait, held } end
if redis.call('LLEN', SUSPECTS) > 0 then return { -1, PENDING_SUSPECTS } end
-- Per-key ordering: heads waiting to start keep up to half the allowance (a call for one
-- message alternates by the clock's parity).
local key_rate, key_per
if per_key then
  -- ("0", ordering switched off: the keys still waiting drain one message at a time.)
  local limit = math.max(1, tonumber(per_key) or 1)
  local r = redis.call('HMGET', FLOW, 'key_rate', 'key_per_ms')
  key_rate, key_per = tonumber(r[1]), tonumber(r[2])
  if not (key_rate and key_per and key_rate > 0 and key_per > 0) then key_rate = nil end
  if key_rate then key_per = rate_window(key_per) end
  -- Keys whose window freed a start take their turn again (all once the rate is gone).
  local cooled = redis.call('ZRANGEBYSCORE', KWAIT, '-inf', key_rate and now or '+inf',
    'LIMIT', 0, 100)
  bulk('ZREM', KWAIT, cooled)
  keys_woken(KBUSY, KHEADS, KQ, cooled, limit)
  -- The keys protocol 7 left ready (a sorted set), drained into heads once.
  if redis.call('EXISTS', KREADY) == 1 then
    local old = redis.call('ZRANGE', KREADY, 0, 99)
    bulk('ZREM', KREADY, old)
    keys_woken(KBUSY, KHEADS, KQ, old, limit)
  end
end
local keyed_share = 0
if per_key and redis.call('LLEN', KHEADS) > 0 then
  keyed_share = math.floor(want / 2)
  if want == 1 and now % 2 == 0 then keyed_share = 1 end
end
local elements = {}
if want > keyed_share then elements = redis.call('LPOP', READY, want - keyed_share) or {} end
local n = #elements
local lock_ms, holder = tonumber(ARGV[2]), ARGV[3]
-- The common case: all fresh, and the popped table is the lease and the reply as is.
local lease, out = elements, { -1, 0, false, elements }
for i = 1, n do
  if not surely_fresh(elements[i]) then
    lease = nil
    break
  end
end
if not lease then
  lease = {}
  out[4] = lease
  -- Strings, formatted once: Lua numbers passed to Redis are formatted per call.
  local deadline = tostring(now + lock_ms)
  local locks, owners, taken, delivered = {}, {}, {}, 0
  for i = 1, n do
    local element = elements[i]
    if surely_fresh(element) then
      lease[#lease + 1] = element
      delivered = delivered + 1
    elseif element ~= WAKE then
      -- (The wake-up marker only woke us: the wait hint below says when it is due.)
      local id, count, envelope = element, nil, redis.call('HGET', MSGS, element)
      if envelope then
        if taken[id] or referenced_elsewhere(INFLIGHT, DELAYED, DEAD_INFO, id) then
          -- A stray reference to a message that is in flight (reserved earlier or in
          -- this very call), delayed or dead (a duplicate pushed by hand): skipped, so
          -- no message is ever in two places.
        else
          taken[id] = true
          count = redis.call('HINCRBY', DELIVERIES, id, 1)
        end
      else
        -- A foreign element that is not an envelope as sent: stored as is, under a
        -- storage id, and delivered (the consumer dead-letters what it cannot decode).
        id = string.format('~%d', redis.call('INCR', SEQ))
        envelope, count = element, 1
        redis.call('HSET', MSGS, id, envelope)
        redis.call('HSET', DELIVERIES, id, '1')
      end
      if count then
        out[#out + 1] = delivered
        out[#out + 1] = id
        out[#out + 1] = count
        out[#out + 1] = envelope
        locks[#locks + 1] = deadline
        locks[#locks + 1] = id
        owners[#owners + 1] = id
        owners[#owners + 1] = holder
        delivered = delivered + 1
      end
    end
  end
  bulk('ZADD', INFLIGHT, locks)
  bulk('HSET', HOLDERS, owners)
end

-- Takes up to `max` heads of keys (keyed.lua) into the lease (after its fresh envelopes),
-- their keys into `lease_keys` in the same order, popped from `kheads` as `ready` is.
-- With a per-key rate, a head whose key's window is full goes back to the head of its
-- key's list, giving its slot back, and the key waits in `kwait`, scored when its window
-- frees a start. Returns the error of a `kheads`, or a key's list or window, that is not
-- of its type (garbage), after putting the heads not yet looked at back onto `kheads`:
-- what the call took before it is leased below all the same, so no popped message is
-- lost.
local lease_keys = {}
local function take_keyed(max)
  local heads, taken, at, parked, starter = {}, 0, 1, {}, nil
  local ok, failure = pcall(function()
    heads = redis.call('LPOP', KHEADS, 2 * max) or {}
    -- (Appends count their table's length: `#t` is a search in Lua 5.1.)
    local popped, leased = #heads, #lease
    while at < popped do
      local key, envelope = heads[at], heads[at + 1]
      local free = true
      if key_rate then
        local starts = KSTARTS .. ':' .. key
        redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - key_per)
        if redis.call('ZCARD', starts) >= key_rate then
          local oldest = redis.call('ZRANGE', starts, 0, 0, 'WITHSCORES')
          redis.call('LPUSH', KQ .. ':' .. key, envelope)
          redis.call('ZADD', KWAIT, tonumber(oldest[2]) + key_per, key)
          parked[#parked + 1] = key
          free = false
        else
          -- (A start's member needs only be unique: one id of `seq` per call.)
          starter = starter or redis.call('INCR', SEQ)
          redis.call('ZADD', starts, now, string.format('%d:%d', starter, taken))
          redis.call('PEXPIRE', starts, key_per + 1000)
        end
      end
      if free then
        taken = taken + 1
        lease[leased + taken], lease_keys[taken] = envelope, key
      end
      at = at + 2
    end
  end)
  if not ok then
    local back = {}
    for i = #heads, at, -1 do back[#back + 1] = heads[i] end
    bulk('LPUSH', KHEADS, back)
  end
  -- A parked head waits in its key's list again: its slot is given back, not passed on.
  slots_released(KBUSY, parked)
  -- The count of messages waiting for their key (send_keyed.lua); gone at zero.
  if taken > 0 and redis.call('HINCRBY', FLOW, 'keyed', -taken) <= 0 then
    redis.call('HDEL', FLOW, 'keyed')
  end
  if not ok then return failure end
end
local failure
if per_key then
  local delivered = #lease + (#out - 4) / 4
  if want > delivered then failure = take_keyed(want - delivered) end
end
if #lease > 0 then
  local token = string.format('~L%d', redis.call('INCRBY', SEQ, #lease) - #lease + 1)
  local list = LEASES .. ':' .. token
  bulk('RPUSH', list, lease)
  bulk('RPUSH', list .. ':keys', lease_keys)
  redis.call('ZADD', LEASES, now + lock_ms, token)
  redis.call('HSET', HOLDERS, token, holder)
  redis.call('INCRBY', LEASED, #lease)
  out[3] = token
end
if failure then error(failure) end
if #lease == 0 and #out == 4 then
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  if #first > 0 then out[1] = math.max(0, tonumber(first[2]) - now) end
  -- (A key over its rate: its turn comes back then.)
  local cooling = per_key and redis.call('ZRANGE', KWAIT, 0, 0, 'WITHSCORES') or {}
  if #cooling > 0 then
    local wait = math.max(1, tonumber(cooling[2]) - now)
    if out[1] < 0 or wait < out[1] then out[1] = wait end
  end
end
flow_started(FLOW, FLOW_STARTS, window, #lease + (#out - 4) / 4, now)
if probe then out[2] = flow_probe_taken(FLOW, #lease + (#out - 4) / 4, now, lock_ms) end
return out
