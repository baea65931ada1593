-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 10 then error({ err = 'ERR bus: admin_delete_dead expects at least 10 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local DEAD, MSGS, DEAD_INFO, ERRORS, DELIVERIES, KOF, KBUSY, KHEADS, KQ, READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
-- (end of the generated shape)
-- Delete dead letters: each id still in the dead list leaves it, and its envelope,
-- dead-letter info, errors and delivery count are deleted. An id no longer there (requeued
-- or deleted meanwhile, or a re-sent call) changes nothing, so the call is safe to repeat.
-- With a 6th key (an operator's delete, not the second step of a move across slots, whose
-- message lives on), the envelope of each deleted letter that mentions `bus-attachment`
-- is appended to the attachment orphans list, for an attachment-aware host to delete the
-- attachment (a byte search, not a decode: a false match is skipped by that host). The
-- list keeps the newest 10,000 and expires 14 days after its last write, like the
-- attachments it points at.
-- Per-key ordering: a deleted dead letter that still holds its key's slot (a
-- blocking dead letter, `on_dead` = `block`: its id is still in `kof`) gives the slot
-- back, as its ack would (keyed.lua's keys_freed): the key's later messages move on. A
-- move across slots deletes through here too: its message leaves this queue, and so does
-- its slot.
-- A 11th KEY, the queue's attachment orphans list, for an operator's delete.
-- ARGV: the ids to delete.
-- Returns the ids deleted.
if #KEYS ~= 10 and #KEYS ~= 11 then
  refuse('admin_delete_dead', string.format('expects 10 or 11 KEYS, got %d', #KEYS))
end
local deleted = {}
for _, id in ipairs(ARGV) do
  if redis.call('LREM', DEAD, 1, id) > 0 then deleted[#deleted + 1] = id end
end
if #deleted > 0 and redis.call('EXISTS', KOF) == 1 then
  keys_freed(KOF, KBUSY, KHEADS, KQ, READY, deleted)
end
if KEYS[11] and #deleted > 0 then
  local orphans = {}
  for i, envelope in ipairs(bulk_read('HMGET', MSGS, deleted)) do
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
bulk('HDEL', MSGS, deleted)
bulk('HDEL', DEAD_INFO, deleted)
bulk('HDEL', ERRORS, deleted)
bulk('HDEL', DELIVERIES, deleted)
return deleted
