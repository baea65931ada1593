-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: batch_open expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 2 then error({ err = 'ERR bus: batch_open expects at least 2 ARGV (policy, parent), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
local BATCH, CALLBACKS = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- Opens a batch unless it exists (then changes nothing): its counters, its policy and
-- parent, and its staged callbacks (queue and message id in BATCH, envelope in CALLBACKS).
-- ARGV: policy ('' for a plain batch, else fail|continue|ignore), parent ('' or
-- '<batch>:<index>'), then per callback: kind, queue, message id, envelope.
-- Returns 1 when it opened the batch, 0 when it existed.
for i = 3, #ARGV, 4 do
  if not ARGV[i + 3] then
    error({ err = 'ERR bus: batch_open expects each callback as kind, queue, id, envelope (docs/wire-format.md, "Workflows")' })
  end
end
if redis.call('EXISTS', BATCH) == 1 then
  return 0
end
redis.call('HSET', BATCH, 'state', 'open', 'total', 0, 'ok', 0, 'dead', 0, 'closed', 0,
  'created', now_ms(), 'policy', ARGV[1], 'parent', ARGV[2])
for i = 3, #ARGV, 4 do
  redis.call('HSET', BATCH, 'cb:' .. ARGV[i], ARGV[i + 1] .. ' ' .. ARGV[i + 2])
  redis.call('HSET', CALLBACKS, ARGV[i], ARGV[i + 3])
end
return 1
