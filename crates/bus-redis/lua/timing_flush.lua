-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: timing_flush expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 3 then error({ err = 'ERR bus: timing_flush expects at least 3 ARGV (sequence, expire_at, marker_ttl), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2, 3 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: timing_flush expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local MINUTE, REPORTED = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- One host's per-type timing of one minute, added to what other hosts recorded
-- (docs/redis-layout.md, "Per-type timing").
-- ARGV: report sequence number, the hash's expiry (Unix s), the marker's ttl (s), then
-- pairs of (message type, packed record). A record is 88 bytes, little-endian:
-- handled u32, failed u32, total µs u64, then 18 bucket counts u32.
-- Returns 1 when added, 0 for a report already recorded (a retried command).
local RECORD = '<I4I4I8' .. string.rep('I4', 18)
local FIELDS = 21
local RECORD_BYTES = 88
local U32 = 4294967295

if #KEYS ~= 2 or #ARGV < 3 or (#ARGV - 3) % 2 ~= 0 then
  return redis.error_reply('ERR timing_flush: wrong number of keys or arguments')
end
local seq = tonumber(ARGV[1])
local expire_at = tonumber(ARGV[2])
local marker_ttl = tonumber(ARGV[3])
if not seq or not expire_at or not marker_ttl or marker_ttl < 1 then
  return redis.error_reply('ERR timing_flush: sequence, expiry and ttl must be numbers')
end
for i = 4, #ARGV, 2 do
  if #ARGV[i + 1] ~= RECORD_BYTES then
    return redis.error_reply('ERR timing_flush: the record of ' .. ARGV[i] .. ' is not ' .. RECORD_BYTES .. ' bytes')
  end
end
local last = tonumber(redis.call('GET', REPORTED) or '0') or 0
if seq <= last then
  return 0
end

local merged = {}
for i = 4, #ARGV, 2 do
  local add = { struct.unpack(RECORD, ARGV[i + 1]) }
  local old = redis.call('HGET', MINUTE, ARGV[i])
  if old then
    if #old ~= RECORD_BYTES then
      return redis.error_reply('ERR timing_flush: the stored record of ' .. ARGV[i] .. ' is not a timing record')
    end
    local have = { struct.unpack(RECORD, old) }
    for j = 1, FIELDS do
      add[j] = add[j] + have[j]
    end
  end
  -- Counts saturate at the u32 maximum rather than wrap.
  for j = 1, FIELDS do
    if j ~= 3 and add[j] > U32 then
      add[j] = U32
    end
  end
  merged[#merged + 1] = ARGV[i]
  merged[#merged + 1] = struct.pack(RECORD, unpack(add, 1, FIELDS))
end
if #merged > 0 then
  redis.call('HSET', MINUTE, unpack(merged))
  redis.call('EXPIREAT', MINUTE, expire_at)
end
redis.call('SET', REPORTED, seq, 'EX', marker_ttl)
return 1
