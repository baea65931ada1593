-- Act on messages a search found on the ready list or among the delayed ones, each only if
-- it is still where it was found (a message reserved, promoted or removed meanwhile is
-- left alone and reported as gone, never duplicated or lost).
-- KEYS: ready, delayed, msgs, deliveries, errors, target ready (the same queue's ready
-- list unless moving to another queue in the same slot).
-- ARGV: place ('ready' | 'delayed'), op ('delete' | 'due' | 'move'), element...
--   'delete': the message is deleted (its stored envelope, count and errors with it).
--   'due' (delayed only): it goes to the tail of the ready list now, as a promotion does.
--   'move': its envelope goes to the tail of the target's ready list as a fresh element
--   (the target gives it a storage id of its own), and it is deleted here.
-- An element is a fresh envelope (ready only) or a storage id (stored in msgs).
-- Returns one flag per element: 1 acted, 0 no longer where it was found.
-- Cost: LREM is linear in the ready list's length (management, bounded pages).
expect('admin_take_found', 6, 3)
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
    removed = redis.call('LREM', KEYS[1], 1, element) > 0
  else
    removed = redis.call('ZREM', KEYS[2], element) > 0
  end
  if removed then
    if op == 'due' then
      redis.call('RPUSH', KEYS[1], element)
    else
      local stored = (place == 'delayed' or not surely_fresh(element))
        and redis.call('HGET', KEYS[3], element)
      if op == 'move' then
        redis.call('RPUSH', KEYS[6], stored or element)
      end
      if stored then
        redis.call('HDEL', KEYS[3], element)
        redis.call('HDEL', KEYS[4], element)
        redis.call('HDEL', KEYS[5], element)
      end
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
