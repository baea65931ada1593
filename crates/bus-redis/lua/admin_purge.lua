-- Purge one batch of waiting messages: up to ARGV[1] elements from the head of the
-- recovered messages waiting to run alone (`suspects`), then of the ready list, and up to
-- ARGV[2] of the earliest delayed ones. A stored message's envelope,
-- delivery count and errors go with it, unless it is referenced elsewhere (common.lua's
-- stray-reference rule: a stray duplicate reference on ready must not delete what a
-- consumer holds).
-- In-flight messages and dead letters are never touched.
-- KEYS: ready, delayed, msgs, deliveries, errors, inflight, dead-info, suspects.
-- ARGV: max ready, max delayed.
-- Returns { ready purged, delayed purged }.
expect('admin_purge', 8, 2, 2, { 1, 2 })
local forget = {}
local ready = {}
if tonumber(ARGV[1]) > 0 then
  ready = redis.call('LPOP', KEYS[8], tonumber(ARGV[1])) or {}
  if #ready < tonumber(ARGV[1]) then
    for _, element in ipairs(redis.call('LPOP', KEYS[1], tonumber(ARGV[1]) - #ready) or {}) do
      ready[#ready + 1] = element
    end
  end
end
for _, element in ipairs(ready) do
  if redis.call('HEXISTS', KEYS[3], element) == 1
      and not referenced_elsewhere(KEYS[6], KEYS[2], KEYS[7], element) then
    forget[#forget + 1] = element
  end
end
local delayed = {}
if tonumber(ARGV[2]) > 0 then
  delayed = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
end
bulk('ZREM', KEYS[2], delayed)
for _, id in ipairs(delayed) do
  -- (No longer delayed: only in flight or dead can hold it now.)
  if not referenced_elsewhere(KEYS[6], KEYS[2], KEYS[7], id) then forget[#forget + 1] = id end
end
bulk('HDEL', KEYS[3], forget)
bulk('HDEL', KEYS[4], forget)
bulk('HDEL', KEYS[5], forget)
return { #ready, #delayed }
