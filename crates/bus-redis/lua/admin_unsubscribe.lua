-- Remove a subscription: drop its name from the topic's subscriptions (so publishes stop
-- writing to it) and delete its queue's keys, in one step. Unless forced, a subscription
-- whose queue still holds messages (ready, in flight, delayed or dead) is left untouched.
-- KEYS: subs, then the subscription queue's ready, inflight, delayed, dead, leases, leased,
-- and every other key of that queue (`QueueKeys::all`, 21 in all with subs). In flight
-- counts the leased messages too, and the lists and sets of the leases (named by the
-- tokens in `leases`) are deleted with the rest.
-- ARGV: name, force (1 or 0).
-- Returns { 1, was registered, keys deleted }, or { 0, ready, inflight, delayed, dead }
-- when refused.
expect('admin_unsubscribe', 21, 2, 2)
if ARGV[2] ~= '0' and ARGV[2] ~= '1' then
  refuse('admin_unsubscribe', string.format('expects force 1 or 0 as ARGV[2], got %s', shown(2)))
end
local held = {
  redis.call('LLEN', KEYS[2]),
  redis.call('ZCARD', KEYS[3]) + tonumber(redis.call('GET', KEYS[7]) or '0'),
  redis.call('ZCARD', KEYS[4]),
  redis.call('LLEN', KEYS[5]),
}
if ARGV[2] ~= '1' and held[1] + held[2] + held[3] + held[4] > 0 then
  return { 0, held[1], held[2], held[3], held[4] }
end
for _, token in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
  redis.call('UNLINK', KEYS[6] .. ':' .. token, KEYS[6] .. ':' .. token .. ':done')
end
local was = redis.call('SREM', KEYS[1], ARGV[1])
local deleted = redis.call('UNLINK', unpack(KEYS, 2))
return { 1, was, deleted }
