-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 5 then error({ err = 'ERR bus: send_keyed_at expects 5 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 2 then error({ err = 'ERR bus: send_keyed_at expects at least 2 ARGV (due_ms, key), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: send_keyed_at expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DELAYED, MSGS, READY, FLOW, KDUE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- (end of the generated shape)
-- Delayed keyed send (docs/redis-layout.md "Per-key ordering"): stored and
-- scheduled as send_at.lua does; on a queue ordered per key (`per_key` in `flow`, not
-- "0") each id is also recorded in `kdue` with its key, so that its promotion
-- (keyed.lua's promote_due) puts it in its key's list instead of `ready`. On any other
-- queue it is a plain delayed send.
-- ARGV: due_ms, key, id, envelope, id, envelope, ...
-- Returns the number of messages stored (0: the batch was stored already).
if ARGV[2] == '' then refuse('send_keyed_at', 'expects a non-empty key as ARGV[2]') end
local ids = store_delayed('send_keyed_at', DELAYED, MSGS, READY, tonumber(ARGV[1]), 3)
if #ids > 0 and tonumber(redis.call('HGET', FLOW, 'per_key') or '0') > 0 then
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = id
    fields[#fields + 1] = ARGV[2]
  end
  bulk('HSET', KDUE, fields)
end
return #ids
