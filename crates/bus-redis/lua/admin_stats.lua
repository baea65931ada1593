-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 9 then error({ err = 'ERR bus: admin_stats expects 9 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 0 then error({ err = 'ERR bus: admin_stats expects 0 ARGV (none), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local READY, INFLIGHT, DELAYED, DEAD, MSGS, SUSPECTS, LEASES, LEASED, FLOW = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
-- (end of the generated shape)
-- The counts of one queue, in one consistent snapshot (read only).
-- Returns { ready, in flight, expired locks, delayed, dead, now (ms, Redis's clock),
-- keyed, the next ready envelope or false }: keyed counts the messages of an ordered
-- queue waiting in their key's list (the `keyed` field of `flow`, kept by send_keyed,
-- reserve and purge); in flight counts every member of `inflight` and every
-- message held in a lease (`leased`: fresh envelopes reserved together share one lock,
-- docs/redis-layout.md); expired locks are those whose deadline is before now (their
-- consumer died or lost Redis; recovery puts them back), counting the messages still
-- held by the first 100 expired leases. Ready counts the recovered messages waiting to be
-- delivered alone (`suspects`, delivered first) and not the wake-up marker `~wake` at the
-- head. The next ready element is resolved through `msgs` when it is a storage id
-- (common.lua's envelope_of).
local now = now_ms()
local ready = redis.call('LLEN', READY) + redis.call('LLEN', SUSPECTS)
local head = redis.call('LINDEX', SUSPECTS, 0) or redis.call('LINDEX', READY, 0)
if head == WAKE then
  ready = ready - 1
  head = redis.call('LINDEX', READY, 1)
end
if head then
  head = envelope_of(MSGS, head)
end
local expired = redis.call('ZCOUNT', INFLIGHT, '-inf', '(' .. now)
for _, token in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', '(' .. now, 'LIMIT', 0, 100)) do
  local lease = LEASES .. ':' .. token
  expired = expired + redis.call('LLEN', lease) - settled_count(lease .. ':done')
end
return {
  ready,
  redis.call('ZCARD', INFLIGHT) + tonumber(redis.call('GET', LEASED) or '0'),
  expired,
  redis.call('ZCARD', DELAYED),
  redis.call('LLEN', DEAD),
  now,
  math.max(0, tonumber(redis.call('HGET', FLOW, 'keyed') or '0') or 0),
  head,
}
