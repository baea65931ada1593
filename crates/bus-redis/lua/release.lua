-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 10 then error({ err = 'ERR bus: release expects 10 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local INFLIGHT, DELIVERIES, READY, ISOLATED, SUSPECTS, LEASES, LEASED, HOLDERS, MSGS, KOF = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
-- (end of the generated shape)
-- Release: return reserved messages that never started to the head of the ready list
-- (a recovered one to the head of `suspects`), in their order, and take back their
-- delivery count. A leased envelope goes back as it was sent: fresh, count 0 again; a
-- leased keyed message is stored (count 0) with its key in `kof`, keeping its key's slot
-- as a stored keyed message does.
-- ARGV: id, count, id, count, ... (reservation order; a leased message: token, index)
expect_receipts('release')
local released = 0
for i = #ARGV - 1, 1, -2 do
  local id = ARGV[i]
  if is_lease(id) then
    local element, key = unlease(LEASES, LEASED, HOLDERS, id, ARGV[i + 1])
    if key then element = store_leased(MSGS, nil, KOF, id, ARGV[i + 1], element, key) end
    if element then
      redis.call('LPUSH', READY, element)
      released = released + 1
    end
  elseif current(INFLIGHT, DELIVERIES, id, ARGV[i + 1]) then
    redis.call('ZREM', INFLIGHT, id)
    redis.call('HDEL', HOLDERS, id)
    redis.call('HINCRBY', DELIVERIES, id, -1)
    if redis.call('SREM', ISOLATED, id) == 1 then
      redis.call('LPUSH', SUSPECTS, id)
    else
      redis.call('LPUSH', READY, id)
    end
    released = released + 1
  end
end
return released
