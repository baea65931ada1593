-- Delayed keyed send (protocol 4; docs/redis-layout.md "Per-key ordering"): stored and
-- scheduled as send_at.lua does; on a queue ordered per key (`per_key` in `flow`, not
-- "0") each id is also recorded in `kdue` with its key, so that its promotion
-- (common.lua's promote_due) puts it in its key's list instead of `ready`. On any other
-- queue it is a plain delayed send.
-- KEYS: delayed, msgs, ready, flow, kdue.
-- ARGV: due_ms, key, id, envelope, id, envelope, ...
-- Returns the number of messages stored (0: the batch was stored already).
expect('send_keyed_at', 5, 2, nil, { 1 })
if ARGV[2] == '' then refuse('send_keyed_at', 'expects a non-empty key as ARGV[2]') end
local ids = store_delayed('send_keyed_at', KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), 3)
if #ids > 0 and tonumber(redis.call('HGET', KEYS[4], 'per_key') or '0') > 0 then
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = id
    fields[#fields + 1] = ARGV[2]
  end
  bulk('HSET', KEYS[5], fields)
end
return #ids
