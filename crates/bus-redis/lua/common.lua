-- Prepended to every script of the bus (see scripts.rs); defines shared helpers.
-- Times come from the Redis clock so that all consumers agree on deadlines.
local ERROR_HISTORY = 10

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Runs `cmd key item...` over a list in chunks (Lua's unpack has a stack limit).
local function bulk(cmd, key, items)
  for i = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- True if `id` is reserved and `count` is its current delivery count: the reservation's
-- token. A stale consumer's transitions are ignored.
local function current(inflight, deliveries, id, count)
  return redis.call('ZSCORE', inflight, id) and redis.call('HGET', deliveries, id) == count
end

local function append_error(errors, id, message, now)
  if message == nil or message == '' then return end
  local raw = redis.call('HGET', errors, id)
  local list = raw and cjson.decode(raw) or {}
  list[#list + 1] = { message = message, at_ms = now }
  while #list > ERROR_HISTORY do table.remove(list, 1) end
  redis.call('HSET', errors, id, cjson.encode(list))
end

-- Moves an id (already out of every other structure) to the dead-letter list.
local function bury(errors, dead, dead_info, id, reason, message, now)
  append_error(errors, id, message, now)
  redis.call('RPUSH', dead, id)
  redis.call('HSET', dead_info, id, cjson.encode({ reason = reason, at_ms = now }))
end
