-- Delete dead letters: each id still in the dead list leaves it, and its envelope,
-- dead-letter info, errors and delivery count are deleted. An id no longer there (requeued
-- or deleted meanwhile, or a re-sent call) changes nothing, so the call is safe to repeat.
-- With a 6th key (an operator's delete, not the second step of a move across slots, whose
-- message lives on), the envelope of each deleted letter that mentions `bus-attachment`
-- is appended to the attachment orphans list, for an attachment-aware host to delete the
-- attachment (a byte search, not a decode: a false match is skipped by that host). The
-- list keeps the newest 10,000 and expires 14 days after its last write, like the
-- attachments it points at.
-- KEYS: dead, msgs, dead-info, errors, deliveries[, attachment orphans].  ARGV: id...
-- Returns the ids deleted.
expect('admin_delete_dead', nil, 0)
if #KEYS ~= 5 and #KEYS ~= 6 then
  refuse('admin_delete_dead', string.format('expects 5 or 6 KEYS, got %d', #KEYS))
end
local deleted = {}
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 1, id) > 0 then deleted[#deleted + 1] = id end
end
if KEYS[6] and #deleted > 0 then
  local orphans = {}
  for i, envelope in ipairs(bulk_read('HMGET', KEYS[2], deleted)) do
    if envelope and string.find(envelope, 'bus-attachment', 1, true) then
      orphans[#orphans + 1] = envelope
    end
  end
  if #orphans > 0 then
    bulk('RPUSH', KEYS[6], orphans)
    redis.call('LTRIM', KEYS[6], -10000, -1)
    redis.call('PEXPIRE', KEYS[6], 14 * 24 * 3600 * 1000)
  end
end
bulk('HDEL', KEYS[2], deleted)
bulk('HDEL', KEYS[3], deleted)
bulk('HDEL', KEYS[4], deleted)
bulk('HDEL', KEYS[5], deleted)
return deleted
