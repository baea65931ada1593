-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 6 then error({ err = 'ERR bus: admin_take_found expects 6 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 3 then error({ err = 'ERR bus: admin_take_found expects at least 3 ARGV (place, op, element), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local READY, DELAYED, MSGS, DELIVERIES, ERRORS, TARGET_READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- (end of the generated shape)
-- Act on messages a search found on the ready list or among the delayed ones, each only if
-- it is still where it was found (a message reserved, promoted or removed meanwhile is
-- left alone and reported as gone, never duplicated or lost).
-- ARGV: place ('ready' | 'delayed'), op ('delete' | 'due' | 'move'), element...
--   'delete': the message is deleted (its stored envelope, count and errors with it).
--   'due' (delayed only): it goes to the tail of the ready list now, as a promotion does.
--   'move': its envelope goes to the tail of the target's ready list as a fresh element
--   (the target gives it a storage id of its own), and it is deleted here.
-- An element is a fresh envelope (ready only) or a storage id (stored in msgs).
-- Returns one flag per element: 1 acted, 0 no longer where it was found.
-- Cost: LREM is linear in the ready list's length (management, bounded pages).
local place, op = ARGV[1], ARGV[2]
if place ~= 'ready' and place ~= 'delayed' then
  refuse('admin_take_found', string.format("expects 'ready' or 'delayed' as ARGV[1], got %s", shown(1)))
end
if op ~= 'delete' and op ~= 'due' and op ~= 'move' then
  refuse('admin_take_found', string.format("expects 'delete', 'due' or 'move' as ARGV[2], got %s", shown(2)))
end
if op == 'due' and place ~= 'delayed' then
  refuse('admin_take_found', "'due' applies to delayed messages only")
end
local out = {}
for i = 3, #ARGV do
  local element = ARGV[i]
  local removed
  if place == 'ready' then
    removed = redis.call('LREM', READY, 1, element) > 0
  else
    removed = redis.call('ZREM', DELAYED, element) > 0
  end
  if removed then
    if op == 'due' then
      redis.call('RPUSH', READY, element)
    else
      local stored = (place == 'delayed' or not surely_fresh(element))
        and redis.call('HGET', MSGS, element)
      if op == 'move' then
        redis.call('RPUSH', TARGET_READY, stored or element)
      end
      if stored then
        redis.call('HDEL', MSGS, element)
        redis.call('HDEL', DELIVERIES, element)
        redis.call('HDEL', ERRORS, element)
      end
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
