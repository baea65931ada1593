-- The keys of an ordered queue with the most messages waiting for them (read only; per-key
-- ordering, docs/redis-layout.md "Per-key ordering"). Looks at the first ARGV[1] keys of
-- `kready` (those whose next message may start), one HSCAN page of about ARGV[1]
-- fields of `kbusy` (keys with messages in flight, those at their limit among them) and the
-- first ARGV[1] keys of `kwait` (those over their per-key rate): every key with waiting
-- messages is in one of them. Each with its waiting count (LLEN of
-- its list) and its messages in flight; the ARGV[2] with the most waiting, most first.
-- Bounded: about 3 x ARGV[1] keys looked at; `complete` says whether that was every key.
-- KEYS: kready, kbusy, kq (the prefix of the keys' lists), kwait.
-- ARGV: keys to look at, top n.
-- Returns { complete (1 or 0), then per key: key, waiting, in flight }.
expect('admin_key_backlogs', 4, 2, 2, { 1, 2 })
local bound, top = math.max(1, tonumber(ARGV[1])), math.max(0, tonumber(ARGV[2]))
local complete = 1
local seen, rows = {}, {}
local function look(key)
  if seen[key] then return end
  seen[key] = true
  local waiting = redis.call('LLEN', KEYS[3] .. ':' .. key)
  if waiting > 0 then
    rows[#rows + 1] = { key, waiting, tonumber(redis.call('HGET', KEYS[2], key) or '0') or 0 }
  end
end
if redis.call('ZCARD', KEYS[1]) > bound then complete = 0 end
for _, key in ipairs(redis.call('ZRANGE', KEYS[1], 0, bound - 1)) do look(key) end
local page = redis.call('HSCAN', KEYS[2], '0', 'COUNT', bound)
if page[1] ~= '0' then complete = 0 end
for i = 1, #page[2], 2 do look(page[2][i]) end
if redis.call('ZCARD', KEYS[4]) > bound then complete = 0 end
for _, key in ipairs(redis.call('ZRANGE', KEYS[4], 0, bound - 1)) do look(key) end
table.sort(rows, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  if a[3] ~= b[3] then return a[3] > b[3] end
  return a[1] < b[1]
end)
local out = { complete }
for i = 1, math.min(top, #rows) do
  out[#out + 1] = rows[i][1]
  out[#out + 1] = rows[i][2]
  out[#out + 1] = rows[i][3]
end
return out
