-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 3 then error({ err = 'ERR bus: run_take expects 3 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 5 then error({ err = 'ERR bus: run_take expects 5 ARGV (limit, claim_ms, outcome_prefix, waiters_prefix, keep_ms), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1, 2, 5 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: run_take expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local DUE, RUNS, ENVS = KEYS[1], KEYS[2], KEYS[3]
-- (end of the generated shape)
-- Up to `limit` parked runs due now, each claimed for `claim_ms` (pushed that far into the
-- future: if its sender dies before run_relayed, another sender takes it again then). A
-- wait that comes due without an outcome timed out: its outcome becomes 't' and it leaves
-- its signal's waiters (`<waiters prefix><signal>`). Returns {token, record, envelope, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000
local due = redis.call('ZRANGEBYSCORE', DUE, '-inf', now, 'LIMIT', 0, ARGV[1])
local out = {}
for _, token in ipairs(due) do
  local record = redis.call('HGET', RUNS, token)
  if not record then
    redis.call('ZREM', DUE, token)
  else
    local run = cjson.decode(record)
    if run.w then
      local outcome = ARGV[3] .. token
      if redis.call('EXISTS', outcome) == 0 then
        redis.call('SET', outcome, 't', 'PX', ARGV[5])
        redis.call('SREM', ARGV[4] .. run.w, token)
      end
    end
    redis.call('ZADD', DUE, now + tonumber(ARGV[2]), token)
    out[#out + 1] = token
    out[#out + 1] = record
    out[#out + 1] = redis.call('HGET', ENVS, token)
  end
end
return out
