-- Edit and retry a dead letter: it leaves the dead list, its edited envelope goes to the
-- tail of the ready list as a fresh element (a new storage id and delivery count, as a
-- send), and the original (envelope, errors, dead-letter info) is appended to the queue's
-- capped `edited` stream, with who edited it: the history an operator looks back at.
-- Per-key ordering (protocol 4): a dead letter that still holds its key's slot (a blocking
-- one: its id is in `kof`) goes instead to the head of its key's list, and the slot is
-- given back (common.lua's keys_freed): the edited message is the next of its key to run,
-- and runs holding a slot of its own, so the key's later messages wait for it.
-- KEYS: dead, msgs, dead-info, errors, deliveries, ready, edited, flow, kof, kbusy,
-- kready, kq.
-- ARGV: storage id, edited envelope, who, entries kept in `edited`.
-- Returns 1 done, 0 not a dead letter (any more), -1 a dead letter without an envelope.
expect('admin_edit_requeue', 12, 4, 4, { 4 })
local id, edited = ARGV[1], ARGV[2]
if not redis.call('LPOS', KEYS[1], id) then return 0 end
local original = redis.call('HGET', KEYS[2], id)
if not original then return -1 end
redis.call('LREM', KEYS[1], 1, id)
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[4], '*',
  'id', id, 'who', ARGV[3], 'original', original, 'edited', edited,
  'errors', redis.call('HGET', KEYS[4], id) or '[]',
  'dead_info', redis.call('HGET', KEYS[3], id) or '')
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[5], id)
local key = redis.call('HGET', KEYS[9], id)
if key then
  redis.call('LPUSH', KEYS[12] .. ':' .. key, edited)
  redis.call('HINCRBY', KEYS[8], 'keyed', 1)
  keys_freed(KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[6], { id }, now_ms())
else
  redis.call('RPUSH', KEYS[6], edited)
end
return 1
