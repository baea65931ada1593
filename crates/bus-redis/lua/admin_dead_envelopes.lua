-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: admin_dead_envelopes expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local DEAD, MSGS = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Read the envelopes of dead letters, for a copy to a queue in another slot: one reply per
-- id, the envelope if the id is in the dead list and stored, else false (nil).
-- LPOS is linear in the dead list's length (fine for management).
-- ARGV: id...
local out = {}
for i, id in ipairs(ARGV) do
  out[i] = redis.call('LPOS', DEAD, id) and redis.call('HGET', MSGS, id) or false
end
return out
