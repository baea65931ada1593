-- The counts of one queue, in one consistent snapshot (read only).
-- KEYS: ready, inflight, delayed, dead, msgs, suspects, leases, leased, flow.
-- Returns { ready, in flight, expired locks, delayed, dead, now (ms, Redis's clock),
-- keyed, the next ready envelope or false }: keyed counts the messages of an ordered
-- queue waiting in their key's list (the `keyed` field of `flow`, kept by send_keyed,
-- reserve and purge; protocol 4); in flight counts every member of `inflight` and every
-- message held in a lease (`leased`: fresh envelopes reserved together share one lock,
-- docs/redis-layout.md); expired locks are those whose deadline is before now (their
-- consumer died or lost Redis; recovery puts them back), counting the messages still
-- held by the first 100 expired leases. Ready counts the recovered messages waiting to be
-- delivered alone (`suspects`, delivered first) and not the wake-up marker `~wake` at the
-- head. The next ready element is resolved through `msgs` when it is a storage id
-- (common.lua's envelope_of).
expect('admin_stats', 9, 0, 0)
local now = now_ms()
local ready = redis.call('LLEN', KEYS[1]) + redis.call('LLEN', KEYS[6])
local head = redis.call('LINDEX', KEYS[6], 0) or redis.call('LINDEX', KEYS[1], 0)
if head == WAKE then
  ready = ready - 1
  head = redis.call('LINDEX', KEYS[1], 1)
end
if head then
  head = envelope_of(KEYS[5], head)
end
local expired = redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. now)
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', '(' .. now, 'LIMIT', 0, 100)) do
  local lease = KEYS[7] .. ':' .. token
  expired = expired + redis.call('LLEN', lease) - redis.call('SCARD', lease .. ':done')
end
return {
  ready,
  redis.call('ZCARD', KEYS[2]) + tonumber(redis.call('GET', KEYS[8]) or '0'),
  expired,
  redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]),
  now,
  math.max(0, tonumber(redis.call('HGET', KEYS[9], 'keyed') or '0') or 0),
  head,
}
