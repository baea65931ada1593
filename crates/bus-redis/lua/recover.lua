-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 19 then error({ err = 'ERR bus: recover expects 19 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 5 then error({ err = 'ERR bus: recover expects 5 ARGV (delivery_limit, batch, error, holder, dead_after_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2, 5 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: recover expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INFLIGHT, DELIVERIES, ERRORS, SUSPECTS, DEAD, DEAD_INFO, ISOLATED, MSGS, LEASES, LEASED, FLOW, KOF, KBUSY, KHEADS, KQ, READY, HOLDERS, SEEN, SINCE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18], KEYS[19]
-- (end of the generated shape)
-- Recover: messages whose lock expired, judged by their holder (common.lua's "Holders").
-- The recovering consumer first marks itself present.
--
-- A lock whose holder is gone (silent for longer than `dead_after` ms, judged by a
-- consumer present for at least that long) is a crash, counting the lost delivery: a
-- message that was held alone (reserve_alone.lua) failed by itself, and at the delivery
-- limit it is dead-lettered, else it waits to run alone again; one held with others goes
-- to `suspects`, to be delivered alone, so that a crasher never takes its batch-mates down.
-- An expired lease is expanded whole into stored messages (their one delivery written into
-- `deliveries`, a keyed one's key into `kof`), which all go to `suspects`.
--
-- A lock whose holder is alive (it called within `dead_after` ms) expired under a stall or
-- a pause, not a crash: it is left for its holder to renew for `dead_after` ms more, then
-- returned to the head of `ready` as an ordinary message (a suspect it was stays one). A
-- lock whose holder is not known yet (the recovering consumer itself was absent: a stall of
-- every link) is left for a later call.
--
-- Bounded per call: `batch` locks of stored messages, then leases until LEASE_MAX messages
-- are passed. A keyed message keeps its key's slot through recovery, so later messages of
-- its key wait for it; one dead-lettered here gives it back as dead_letter.lua does.
-- ARGV: delivery_limit, batch, error, holder (the recovering consumer), dead_after_ms.
-- Returns the number of messages recovered.
local now = now_ms()
local limit, dead_after = tonumber(ARGV[1]), tonumber(ARGV[5])
local judging = now - mark_present(SEEN, SINCE, ARGV[4], now, dead_after) >= dead_after
-- Holders silent for a hundred times `dead_after` are forgotten (a bounded batch per call).
local forgotten = redis.call('ZRANGEBYSCORE', SEEN, '-inf', now - 100 * dead_after,
  'LIMIT', 0, 10)
if #forgotten > 0 then
  redis.call('ZREM', SEEN, unpack(forgotten))
  redis.call('HDEL', SINCE, unpack(forgotten))
end
-- What to do with an expired lock: 'gone', 'alive' (its grace is over: an ordinary
-- redelivery), or nil (leave it).
local function verdict(lock, deadline)
  local state = holder_state(HOLDERS, SEEN, lock, now, dead_after, judging)
  if state == 'alive' and now - deadline < dead_after then return nil end
  return state
end
local expired = redis.call('ZRANGEBYSCORE', INFLIGHT, '-inf', now, 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[2]))
local recovered, requeued = 0, {}
for i = 1, #expired, 2 do
  local id = expired[i]
  local state = verdict(id, tonumber(expired[i + 1]))
  if state then
    recovered = recovered + 1
    redis.call('ZREM', INFLIGHT, id)
    redis.call('HDEL', HOLDERS, id)
    local alone = redis.call('SREM', ISOLATED, id) == 1
    if state == 'alive' then
      append_error(ERRORS, id, ARGV[3], now)
      if alone then redis.call('LPUSH', SUSPECTS, id) else requeued[#requeued + 1] = id end
    elseif alone and tonumber(redis.call('HGET', DELIVERIES, id) or '0') >= limit then
      bury(ERRORS, DEAD, DEAD_INFO, id, 'delivery_limit', ARGV[3], now)
      if not dead_letter_blocks(FLOW) then
        keys_freed(KOF, KBUSY, KHEADS, KQ, READY, { id })
      end
    else
      append_error(ERRORS, id, ARGV[3], now)
      redis.call('RPUSH', SUSPECTS, id)
    end
  end
end
-- A new storage id has no error history yet: the lost lock is its first error.
local lost = ARGV[3] ~= '' and cjson.encode({ { message = ARGV[3], at_ms = now } })
local leases = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 50)
for i = 1, #leases, 2 do
  if recovered >= LEASE_MAX then break end
  local token = leases[i]
  local state = verdict(token, tonumber(leases[i + 1]))
  if state then
    local lease = LEASES .. ':' .. token
    local done = lease .. ':done'
    local envelopes = redis.call('LRANGE', lease, 0, -1)
    local settled = settled_indices(done, #envelopes)
    -- The keys of the lease's last messages (common.lua's "Leases").
    local key_of = redis.call('LRANGE', lease .. ':keys', 0, -1)
    local unkeyed = #envelopes - #key_of
    local first = tonumber(string.sub(token, 3))
    local stored, counts, errors, ids, keys = {}, {}, {}, {}, {}
    for j, envelope in ipairs(envelopes) do
      if not settled[j] then
        local k, id = #ids + 1, string.format('~%d', first + j - 1)
        ids[k] = id
        stored[2 * k - 1], stored[2 * k] = id, envelope
        counts[2 * k - 1], counts[2 * k] = id, '1'
        errors[2 * k - 1], errors[2 * k] = id, lost
        if j > unkeyed then
          keys[#keys + 1] = id
          keys[#keys + 1] = key_of[j - unkeyed]
        end
      end
    end
    local k = #ids
    if k > 0 then
      bulk('HSET', MSGS, stored)
      bulk('HSET', DELIVERIES, counts)
      bulk('HSET', KOF, keys)
      if lost then bulk('HSET', ERRORS, errors) end
      if state == 'alive' then
        for _, id in ipairs(ids) do requeued[#requeued + 1] = id end
      else
        bulk('RPUSH', SUSPECTS, ids)
      end
      unleased(LEASED, k)
    end
    redis.call('DEL', lease, done, lease .. ':keys')
    redis.call('ZREM', LEASES, token)
    redis.call('HDEL', HOLDERS, token)
    recovered = recovered + k
  end
end
-- Ordinary redeliveries go back to the head of `ready`, in the order they were taken.
local reversed = {}
for i = #requeued, 1, -1 do reversed[#reversed + 1] = requeued[i] end
bulk('LPUSH', READY, reversed)
return recovered
