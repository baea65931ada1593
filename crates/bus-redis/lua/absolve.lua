-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: absolve expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local SUSPECTS, READY = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Absolve: a consumer whose locks were lost while it was alive (a stalled or cut link, a
-- blocked runtime: its renewals came too late) returns the messages that recovery made
-- suspects of to the head of the ready list. Their holder did not crash, so they are
-- not crash suspects, and running them one at a time (reserve_alone.lua) would stall
-- the queue for as many handler runs as the holder had messages. Only ids still
-- waiting in `suspects` move: one already taken to run alone stays where it is.
-- ARGV: receipts as release.lua takes them, in reservation order: id, count, ... (a
-- leased message: token, index).
-- Returns the number of messages moved. An index in another spelling than reserve's names
-- no message (a stale receipt, as everywhere).
expect_receipts('absolve')
local moved = 0
for i = #ARGV - 1, 1, -2 do
  local id = ARGV[i]
  if is_lease(id) then
    id = canonical_index(ARGV[i + 1]) and leased_id(id, ARGV[i + 1])
  end
  if id and redis.call('LREM', SUSPECTS, 1, id) == 1 then
    redis.call('LPUSH', READY, id)
    moved = moved + 1
  end
end
return moved
