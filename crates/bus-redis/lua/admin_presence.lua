-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 6 then error({ err = 'ERR bus: admin_presence expects 6 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: admin_presence expects 3 ARGV (kind, key, count), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: admin_presence expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local MSGS, DELIVERIES, INFLIGHT, DEAD_INFO, LEASE, LEASE_DONE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- (end of the generated shape)
-- Where a reserved message is now (read only, for Admin::presence: what resolves a
-- workflow member whose settle a crash left unconfirmed). ARGV: the receipt's kind
-- ('stored' or 'leased'), its key (storage id, or lease token `~L<first>`) and its count
-- (stored: the delivery count it was reserved at; leased: its index in the lease).
-- LEASE and LEASE_DONE are the lease's list and done bitmap (a set of indices if protocol 9
-- or before left it; any key for a stored receipt).
-- Returns 'held' (still under this reservation), 'stored' (stored under another
-- reservation, or ready again), 'dead' (a dead letter) or 'gone' (acknowledged or deleted).
local kind, key, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local id = key
if kind == 'leased' then
  if n >= 0 and n < redis.call('LLEN', LEASE) and not settled_at(LEASE_DONE, n) then
    return 'held'
  end
  -- A message leaves its lease other than by ack as its stored id (common.lua).
  id = leased_id(key, n)
end
if redis.call('HEXISTS', MSGS, id) == 0 then
  return 'gone'
end
if redis.call('HEXISTS', DEAD_INFO, id) == 1 then
  return 'dead'
end
if kind == 'stored' and redis.call('ZSCORE', INFLIGHT, id)
    and tonumber(redis.call('HGET', DELIVERIES, id)) == n then
  return 'held'
end
return 'stored'
