-- Read the envelopes of dead letters, for a copy to a queue in another slot: one reply per
-- id, the envelope if the id is in the dead list and stored, else false (nil).
-- LPOS is linear in the dead list's length (fine for management).
-- KEYS: dead, msgs.  ARGV: id...
expect('admin_dead_envelopes', 2, 0)
local out = {}
for i, id in ipairs(ARGV) do
  out[i] = redis.call('LPOS', KEYS[1], id) and redis.call('HGET', KEYS[2], id) or false
end
return out
