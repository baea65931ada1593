-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 5 then error({ err = 'ERR bus: renew expects 5 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 4 then error({ err = 'ERR bus: renew expects at least 4 ARGV (lock_ms, holder, dead_after_ms, s), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 3, 4 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: renew expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local INFLIGHT, DELIVERIES, LEASES, SEEN, SINCE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- (end of the generated shape)
-- Renew: extend the locks of held messages, and mark the renewing consumer present
-- (common.lua's `mark_present`). Allowed on a full Redis (it only rewrites existing scores and
-- its own presence), so that locks hold while operators drain a full Redis.
-- ARGV: lock_ms, holder, dead_after_ms, s, then s stored receipts (id, count), then lease
-- tokens.
-- Returns 1 per stored receipt and per lease whose lock was extended, 0 where it was lost.
-- A lock that expired but was not recovered yet is still held, and is extended.
local s = tonumber(ARGV[4])
if s < 0 or #ARGV < 4 + 2 * s then
  refuse('renew', string.format('expects %d stored receipts (id, count) after s, got %d ARGV', s, #ARGV - 4))
end
local now = now_ms()
mark_present(SEEN, SINCE, ARGV[2], now, tonumber(ARGV[3]))
local deadline = now + tonumber(ARGV[1])
local out = {}
for i = 5, 4 + 2 * s, 2 do
  if current(INFLIGHT, DELIVERIES, ARGV[i], ARGV[i + 1]) then
    redis.call('ZADD', INFLIGHT, 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
for i = 5 + 2 * s, #ARGV do
  if redis.call('ZSCORE', LEASES, ARGV[i]) then
    redis.call('ZADD', LEASES, 'XX', deadline, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
