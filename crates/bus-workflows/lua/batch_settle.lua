-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 7 then error({ err = 'ERR bus: batch_settle expects 7 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local BATCH, DONE, SETTLING, DEAD, RESULTS, DEFER, CALLBACKS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
-- (end of the generated shape)
-- Applies settles to members, then returns the callbacks that fire now (as fire()), or -1
-- when the batch does not exist. ARGV in threes: op, index, detail:
-- - `confirm`: the member's transport settle is stored: count it as its mark says (ok:
--   succeeded, with its result kept for a parent's children; dead: dead, the mark kept as
--   its record). Nothing without a mark, or for a member settled already. A member that
--   opened a child batch (DEFER) is only noted (`<index>:own`) until its child hands off.
-- - `drop`: the transport settle did not happen: drop the mark.
-- The detail of `confirm` and `drop` names the delivery the mark must have been written
-- for (`<sh> <k> d<n>` or `<sh> <k> i<n>`, the mark JSON's receipt fields), or is '' for
-- any mark: a sweep or a late drop acts on what it saw, and a newer delivery's mark,
-- written since, is left to that delivery's own settle.
-- - `child`: the member's child batch handed off; detail '' (it succeeded) or why it
--   failed. The member settles if its own ack was confirmed, else that is noted
--   (`<index>:child`).
expect_groups('batch_settle', 1, 3, 1)
for i = 1, #ARGV, 3 do
  local op = ARGV[i]
  if op ~= 'confirm' and op ~= 'drop' and op ~= 'child' then
    error({ err = 'ERR bus: batch_settle expects confirm, drop or child as ARGV[' .. i .. '] (docs/wire-format.md, "Workflows")' })
  end
end
local policy = redis.call('HGET', BATCH, 'policy')
if not policy then
  return -1
end
local collect = policy ~= ''
local deferred = redis.call('EXISTS', DEFER) == 1
local ok_n, dead_n = 0, 0

-- Whether `mark` ('<ms> <ok|dead> <json>') was written for the delivery `tag` names.
local function written_for(mark, tag)
  if tag == '' then return true end
  local json = string.match(mark, '^%d+ %a+ (.*)$')
  local ok, m = pcall(cjson.decode, json or '')
  if not ok or type(m) ~= 'table' then return false end
  local n = m.d and ('d' .. tostring(m.d)) or ('i' .. tostring(m.i))
  return tostring(m.sh) .. ' ' .. tostring(m.k) .. ' ' .. n == tag
end

local function settled(i)
  redis.call('SETBIT', DONE, i, 1)
  if deferred then
    redis.call('HDEL', DEFER, i, i .. ':own', i .. ':ownr', i .. ':child')
  end
end
local function settle_ok(i, result)
  settled(i)
  ok_n = ok_n + 1
  if collect and result then
    redis.call('HSET', RESULTS, i, result)
  end
end
local function settle_dead(i, record)
  settled(i)
  dead_n = dead_n + 1
  redis.call('HSET', DEAD, i, record)
end
-- A member with a child batch: its own ack (mark json, result) and the child's end.
local function combine(i, own, result, failed)
  if failed == '' then
    settle_ok(i, result)
    return
  end
  local record = cjson.decode(own)
  record.o, record.r, record.e, record.at = 'dead', 'child_batch', failed, now_ms()
  settle_dead(i, cjson.encode(record))
end

for j = 1, #ARGV, 3 do
  local op, i, detail = ARGV[j], ARGV[j + 1], ARGV[j + 2]
  if op == 'drop' then
    local mark = redis.call('HGET', SETTLING, i)
    if mark and written_for(mark, detail) then
      redis.call('HDEL', SETTLING, i, i .. ':r')
    end
  elseif redis.call('GETBIT', DONE, i) == 1 then
    redis.call('HDEL', SETTLING, i, i .. ':r')
  elseif op == 'confirm' then
    local mark = redis.call('HGET', SETTLING, i)
    if mark and written_for(mark, detail) then
      local result = redis.call('HGET', SETTLING, i .. ':r')
      redis.call('HDEL', SETTLING, i, i .. ':r')
      -- '<ms> <ok|dead> <json>'
      local a = string.find(mark, ' ', 1, true)
      local b = string.find(mark, ' ', a + 1, true)
      local o, json = string.sub(mark, a + 1, b - 1), string.sub(mark, b + 1)
      if o ~= 'ok' then
        settle_dead(i, json)
      elseif deferred and redis.call('HEXISTS', DEFER, i) == 1 then
        local child = redis.call('HGET', DEFER, i .. ':child')
        if child then
          combine(i, json, result, string.sub(child, 2))
        else
          redis.call('HSET', DEFER, i .. ':own', json)
          if result then
            redis.call('HSET', DEFER, i .. ':ownr', result)
          end
        end
      else
        settle_ok(i, result)
      end
    end
  else
    local own = deferred and redis.call('HGET', DEFER, i .. ':own')
    if own then
      combine(i, own, redis.call('HGET', DEFER, i .. ':ownr'), detail)
    else
      -- 'x' first, so that a success ('') is a non-empty value.
      redis.call('HSET', DEFER, i .. ':child', 'x' .. detail)
      deferred = true
    end
  end
end
if ok_n > 0 then
  redis.call('HINCRBY', BATCH, 'ok', ok_n)
end
if dead_n > 0 then
  redis.call('HINCRBY', BATCH, 'dead', dead_n)
end
return fire(BATCH, CALLBACKS)
