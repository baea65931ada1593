-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 4 then error({ err = 'ERR bus: admin_in_flight expects 4 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 1 then error({ err = 'ERR bus: admin_in_flight expects 1 ARGV (n), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: admin_in_flight expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INFLIGHT, MSGS, DELIVERIES, LEASES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- (end of the generated shape)
-- In flight (read only, for Admin::in_flight): the first N in-flight messages by lock deadline,
-- stored ones (`inflight`) and leased ones (`leases`) merged. A leased message is shown
-- under the storage id it gets if it leaves its lease other than by ack, with its
-- implicit delivery count 1. Bounded by N (and the leases, each at most LEASE_MAX).
-- ARGV: n.
-- Returns { id, deadline_ms, delivery_count, envelope or false, ... }.
local n = tonumber(ARGV[1])
local out = {}
if n <= 0 then return out end
local function add(id, deadline, count, envelope)
  out[#out + 1] = id
  out[#out + 1] = deadline
  out[#out + 1] = count
  out[#out + 1] = envelope or false
end
local locked = redis.call('ZRANGE', INFLIGHT, 0, n - 1, 'WITHSCORES')
local leases = redis.call('ZRANGE', LEASES, 0, n - 1, 'WITHSCORES')
local i, j = 1, 1
while #out < 4 * n and (i <= #locked or j <= #leases) do
  if j > #leases or (i <= #locked and tonumber(locked[i + 1]) <= tonumber(leases[j + 1])) then
    local id = locked[i]
    add(id, tonumber(locked[i + 1]), tonumber(redis.call('HGET', DELIVERIES, id) or '0'), redis.call('HGET', MSGS, id))
    i = i + 2
  else
    local token, lease = leases[j], LEASES .. ':' .. leases[j]
    local envelopes = redis.call('LRANGE', lease, 0, -1)
    local settled = settled_indices(lease .. ':done', #envelopes)
    for index, envelope in ipairs(envelopes) do
      if #out >= 4 * n then break end
      if not settled[index] then
        add(leased_id(token, index - 1), tonumber(leases[j + 1]), 1, envelope)
      end
    end
    j = j + 2
  end
end
return out
