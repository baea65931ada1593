-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: batch_inspect expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 2 then error({ err = 'ERR bus: batch_inspect expects 2 ARGV (stale_ms, count), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: batch_inspect expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local BATCH, SETTLING, CALLBACKS = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- What the sweeper must look at in a batch: {state, parent, failure, unsent callbacks (as
-- fire() returns them), stale marks (index, '<ok|dead> <json>' pairs)}; {} when the batch
-- does not exist. A mark is stale when written more than `stale_ms` ago; the marks are
-- read `count` at a time, from a cursor kept in BATCH's `sweep` field, so that every
-- mark is looked at however many there are.
local b = redis.call('HMGET', BATCH, 'state', 'parent', 'outcome', 'dead', 'total', 'sweep')
if not b[1] then
  return {}
end
local before = now_ms() - tonumber(ARGV[1])
local scan = redis.call('HSCAN', SETTLING, b[6] or '0', 'COUNT', ARGV[2])
redis.call('HSET', BATCH, 'sweep', scan[1])
local stale = {}
local fields = scan[2]
for j = 1, #fields, 2 do
  local field, value = fields[j], fields[j + 1]
  if not string.find(field, ':', 1, true) then
    local sp = string.find(value, ' ', 1, true)
    if tonumber(string.sub(value, 1, sp - 1)) <= before then
      stale[#stale + 1] = field
      stale[#stale + 1] = string.sub(value, sp + 1)
    end
  end
end
return { b[1], b[2], failure(b[3], b[4], b[5]), unsent(BATCH, CALLBACKS), stale }
