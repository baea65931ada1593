-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 8 then error({ err = 'ERR bus: send_keyed expects 8 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 2 then error({ err = 'ERR bus: send_keyed expects at least 2 ARGV (key, envelope), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local READY, FLOW, KHEADS, KBUSY, KQ, DELAYED, MSGS, KDUE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
-- (end of the generated shape)
-- Keyed send (docs/redis-layout.md "Per-key ordering"): on a queue that asks
-- for ordering (`per_key` in `flow`, not "0"), the envelopes wait in their key's list and
-- the key becomes ready if it has a free slot; on any other queue they go onto `ready`,
-- as a plain send. On an ordered queue the due delayed messages are promoted first
-- (keyed.lua's promote_due), so that a delayed keyed send already due goes ahead of
-- this batch in its key's order whether or not a consumer reserved since it fell due.
-- The flow hash's `keyed` field counts the messages waiting in the keys' lists (what
-- `bus stats` shows as keyed); reserve and purge take it down.
-- ARGV: key, envelope, envelope, ...
-- Returns the number of envelopes stored (as a re-sent RPUSH, a re-sent call stores the
-- batch again).
local key = ARGV[1]
if key == '' then refuse('send_keyed', 'expects a non-empty key as ARGV[1]') end
local limit = tonumber(redis.call('HGET', FLOW, 'per_key') or '0') or 0
local envelopes = {}
for i = 2, #ARGV do envelopes[i - 1] = ARGV[i] end
if limit > 0 then
  local now = now_ms()
  promote_due(DELAYED, READY, MSGS, KDUE, FLOW, KHEADS, KBUSY, KQ, now)
  join_key(READY, FLOW, KHEADS, KBUSY, KQ, key, envelopes, limit)
else
  bulk('RPUSH', READY, envelopes)
end
return #envelopes
