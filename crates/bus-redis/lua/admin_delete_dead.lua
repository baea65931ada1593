-- Delete dead letters: each id still in the dead list leaves it, and its envelope,
-- dead-letter info, errors and delivery count are deleted. An id no longer there (requeued
-- or deleted meanwhile, or a re-sent call) changes nothing, so the call is safe to repeat.
-- With a 6th key (an operator's delete, not the second step of a move across slots, whose
-- message lives on), the envelope of each deleted letter that mentions `bus-attachment`
-- is appended to the attachment orphans list, for an attachment-aware host to delete the
-- attachment (a byte search, not a decode: a false match is skipped by that host). The
-- list keeps the newest 10,000 and expires 14 days after its last write, like the
-- attachments it points at.
-- Per-key ordering (protocol 4): a deleted dead letter that still holds its key's slot (a
-- blocking dead letter, `on_dead` = `block`: its id is still in `kof`) gives the slot
-- back, as its ack would (common.lua's keys_freed): the key's later messages move on. A
-- move across slots deletes through here too: its message leaves this queue, and so does
-- its slot.
-- KEYS: dead, msgs, dead-info, errors, deliveries, kof, kbusy, kready, kq, ready
-- [, attachment orphans].  ARGV: id...
-- Returns the ids deleted.
expect('admin_delete_dead', nil, 0)
if #KEYS ~= 10 and #KEYS ~= 11 then
  refuse('admin_delete_dead', string.format('expects 10 or 11 KEYS, got %d', #KEYS))
end
local deleted = {}
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 1, id) > 0 then deleted[#deleted + 1] = id end
end
if #deleted > 0 and redis.call('EXISTS', KEYS[6]) == 1 then
  keys_freed(KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], deleted, now_ms())
end
if KEYS[11] and #deleted > 0 then
  local orphans = {}
  for i, envelope in ipairs(bulk_read('HMGET', KEYS[2], deleted)) do
    if envelope and string.find(envelope, 'bus-attachment', 1, true) then
      orphans[#orphans + 1] = envelope
    end
  end
  if #orphans > 0 then
    bulk('RPUSH', KEYS[11], orphans)
    redis.call('LTRIM', KEYS[11], -10000, -1)
    redis.call('PEXPIRE', KEYS[11], 14 * 24 * 3600 * 1000)
  end
end
bulk('HDEL', KEYS[2], deleted)
bulk('HDEL', KEYS[3], deleted)
bulk('HDEL', KEYS[4], deleted)
bulk('HDEL', KEYS[5], deleted)
return deleted
