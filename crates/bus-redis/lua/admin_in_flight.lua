-- In flight (read only, for Admin::in_flight): the first N in-flight messages by lock deadline,
-- stored ones (`inflight`) and leased ones (`leases`) merged. A leased message is shown
-- under the storage id it gets if it leaves its lease other than by ack, with its
-- implicit delivery count 1. Bounded by N (and the leases, each at most LEASE_MAX).
-- KEYS: inflight, msgs, deliveries, leases.  ARGV: n.
-- Returns { id, deadline_ms, delivery_count, envelope or false, ... }.
expect('admin_in_flight', 4, 1, 1, { 1 })
local n = tonumber(ARGV[1])
local out = {}
if n <= 0 then return out end
local function add(id, deadline, count, envelope)
  out[#out + 1] = id
  out[#out + 1] = deadline
  out[#out + 1] = count
  out[#out + 1] = envelope or false
end
local locked = redis.call('ZRANGE', KEYS[1], 0, n - 1, 'WITHSCORES')
local leases = redis.call('ZRANGE', KEYS[4], 0, n - 1, 'WITHSCORES')
local i, j = 1, 1
while #out < 4 * n and (i <= #locked or j <= #leases) do
  if j > #leases or (i <= #locked and tonumber(locked[i + 1]) <= tonumber(leases[j + 1])) then
    local id = locked[i]
    add(id, tonumber(locked[i + 1]), tonumber(redis.call('HGET', KEYS[3], id) or '0'), redis.call('HGET', KEYS[2], id))
    i = i + 2
  else
    local token, lease = leases[j], KEYS[4] .. ':' .. leases[j]
    local settled = {}
    for _, index in ipairs(redis.call('SMEMBERS', lease .. ':done')) do settled[index] = true end
    for index, envelope in ipairs(redis.call('LRANGE', lease, 0, -1)) do
      if #out >= 4 * n then break end
      if not settled[tostring(index - 1)] then
        add(leased_id(token, index - 1), tonumber(leases[j + 1]), 1, envelope)
      end
    end
    j = j + 2
  end
end
return out
