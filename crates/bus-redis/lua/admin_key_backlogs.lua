-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 5 then error({ err = 'ERR bus: admin_key_backlogs expects 5 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: admin_key_backlogs expects 2 ARGV (keys, top), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: admin_key_backlogs expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local KHEADS, KBUSY, KQ, KWAIT, KREADY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- (end of the generated shape)
-- The keys of an ordered queue with the most messages waiting for them (read only; per-key
-- ordering, docs/redis-layout.md "Per-key ordering"). Looks at the keys of the first
-- ARGV[1] heads of `kheads` (messages that may start), one HSCAN page of about ARGV[1]
-- fields of `kbusy` (keys with slots taken, those at their limit among them) and the
-- first ARGV[1] keys of `kwait` (those over their per-key rate) and of `kready` (those a
-- protocol-7 client left ready, until reserve drained them; protocol 9): every key with
-- waiting messages is in one of them. Each with its waiting count (LLEN of its list, plus its
-- heads among those looked at) and its messages in flight (its slots taken, less those
-- heads); the ARGV[2] with the most waiting, most first. Bounded: about 4 x ARGV[1] keys looked at;
-- `complete` says whether that was every key.
-- ARGV: keys to look at, top n.
-- Returns { complete (1 or 0), then per key: key, waiting, in flight }.
local bound, top = math.max(1, tonumber(ARGV[1])), math.max(0, tonumber(ARGV[2]))
local complete = 1
local seen, rows, heads = {}, {}, {}
local function look(key)
  if seen[key] then return end
  seen[key] = true
  local waiting = redis.call('LLEN', KQ .. ':' .. key) + (heads[key] or 0)
  if waiting > 0 then
    local taken = tonumber(redis.call('HGET', KBUSY, key) or '0') or 0
    rows[#rows + 1] = { key, waiting, math.max(0, taken - (heads[key] or 0)) }
  end
end
if redis.call('LLEN', KHEADS) > 2 * bound then complete = 0 end
local page = redis.call('LRANGE', KHEADS, 0, 2 * bound - 1)
for i = 1, #page, 2 do heads[page[i]] = (heads[page[i]] or 0) + 1 end
for i = 1, #page, 2 do look(page[i]) end
local scan = redis.call('HSCAN', KBUSY, '0', 'COUNT', bound)
if scan[1] ~= '0' then complete = 0 end
for i = 1, #scan[2], 2 do look(scan[2][i]) end
for _, set in ipairs({ KWAIT, KREADY }) do
  if redis.call('ZCARD', set) > bound then complete = 0 end
  for _, key in ipairs(redis.call('ZRANGE', set, 0, bound - 1)) do look(key) end
end
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
