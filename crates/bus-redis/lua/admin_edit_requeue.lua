-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 12 then error({ err = 'ERR bus: admin_edit_requeue expects 12 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 4 then error({ err = 'ERR bus: admin_edit_requeue expects 4 ARGV (id, envelope, who, kept), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 4 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: admin_edit_requeue expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DEAD, MSGS, DEAD_INFO, ERRORS, DELIVERIES, READY, EDITED, FLOW, KOF, KBUSY, KHEADS, KQ = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
-- (end of the generated shape)
-- Edit and retry a dead letter: it leaves the dead list, its edited envelope goes to the
-- tail of the ready list as a fresh element (a new storage id and delivery count, as a
-- send), and the original (envelope, errors, dead-letter info) is appended to the queue's
-- capped `edited` stream, with who edited it: the history an operator looks back at.
-- Per-key ordering: a dead letter that still holds its key's slot (a blocking
-- one: its id is in `kof`) goes instead to the head of its key's list, and the slot is
-- given back (keyed.lua's keys_freed): the edited message is the next of its key to run,
-- and runs holding a slot of its own, so the key's later messages wait for it.
-- ARGV: storage id, edited envelope, who, entries kept in `edited`.
-- Returns 1 done, 0 not a dead letter (any more), -1 a dead letter without an envelope.
local id, edited = ARGV[1], ARGV[2]
if not redis.call('LPOS', DEAD, id) then return 0 end
local original = redis.call('HGET', MSGS, id)
if not original then return -1 end
redis.call('LREM', DEAD, 1, id)
redis.call('XADD', EDITED, 'MAXLEN', '~', ARGV[4], '*',
  'id', id, 'who', ARGV[3], 'original', original, 'edited', edited,
  'errors', redis.call('HGET', ERRORS, id) or '[]',
  'dead_info', redis.call('HGET', DEAD_INFO, id) or '')
redis.call('HDEL', MSGS, id)
redis.call('HDEL', DEAD_INFO, id)
redis.call('HDEL', ERRORS, id)
redis.call('HDEL', DELIVERIES, id)
local key = redis.call('HGET', KOF, id)
if key then
  redis.call('LPUSH', KQ .. ':' .. key, edited)
  redis.call('HINCRBY', FLOW, 'keyed', 1)
  keys_freed(KOF, KBUSY, KHEADS, KQ, READY, { id })
else
  redis.call('RPUSH', READY, edited)
end
return 1
