-- Release: return reserved messages that never started to the head of the ready list
-- (a recovered one to the head of `suspects`), in their order, and take back their
-- delivery count. A leased envelope goes back as it was sent: fresh, count 0 again.
-- KEYS: inflight, deliveries, ready, isolated, suspects, leases, leased.
-- ARGV: id, count, id, count, ... (reservation order; a leased message: token, index)
expect_receipts('release', 7)
local released = 0
for i = #ARGV - 1, 1, -2 do
  local id = ARGV[i]
  if is_lease(id) then
    local envelope = unlease(KEYS[6], KEYS[7], id, ARGV[i + 1])
    if envelope then
      redis.call('LPUSH', KEYS[3], envelope)
      released = released + 1
    end
  elseif current(KEYS[1], KEYS[2], id, ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', KEYS[2], id, -1)
    if redis.call('SREM', KEYS[4], id) == 1 then
      redis.call('LPUSH', KEYS[5], id)
    else
      redis.call('LPUSH', KEYS[3], id)
    end
    released = released + 1
  end
end
return released
