-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: batch_mark expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
local BATCH, DONE, SETTLING = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Writes the marks of members about to be settled by their transport (an ack, a dead
-- letter), skipping members settled already. ARGV in threes: index, mark, result, where
-- the mark is `ok <json>` or `dead <json>` (docs/wire-format.md, "Workflows") and the
-- result the member's JSON result ('' for none). Stored as SETTLING[index] =
-- '<ms> <mark>' (Redis's clock) and SETTLING['<index>:r'] = result.
-- Returns how many it wrote, or -1 when the batch does not exist.
expect_groups('batch_mark', 1, 3, 0)
local policy = redis.call('HGET', BATCH, 'policy')
if not policy then
  return -1
end
-- Only a parent's children keep results, so only they can hold an older delivery's.
local collect = policy ~= ''
local now = now_ms()
local written = 0
for i = 1, #ARGV, 3 do
  if redis.call('GETBIT', DONE, ARGV[i]) == 0 then
    redis.call('HSET', SETTLING, ARGV[i], now .. ' ' .. ARGV[i + 1])
    if ARGV[i + 2] ~= '' then
      redis.call('HSET', SETTLING, ARGV[i] .. ':r', ARGV[i + 2])
    elseif collect then
      redis.call('HDEL', SETTLING, ARGV[i] .. ':r')
    end
    written = written + 1
  end
end
return written
