-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS ~= 2 then error({ err = 'ERR bus: send_tick expects 2 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV ~= 3 then error({ err = 'ERR bus: send_tick expects 3 ARGV (tick_ms, catch_up, envelope), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: send_tick expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local SCHEDULE, READY = KEYS[1], KEYS[2]
-- (end of the generated shape)
-- One tick of a recurring schedule: store its message only if the tick is newer than the
-- last one stored for the schedule (a catch-up: only if there is a last one), and record
-- it as the last; the check, the record and the push are one step, so hosts racing with
-- one tick store it once (docs/redis-layout.md, "Recurring messages (cron)").
-- ARGV: tick_ms, catch_up ('1' or ''), envelope.
-- Returns 1 when stored, 0 when not (nothing written).
if ARGV[2] ~= '' and ARGV[2] ~= '1' then
  refuse('send_tick', string.format("expects '1' or nothing as ARGV[2], got %s", shown(2)))
end
local last = redis.call('GET', SCHEDULE)
if last then
  if tonumber(last) >= tonumber(ARGV[1]) then return 0 end
elseif ARGV[2] == '1' then
  return 0
end
redis.call('SET', SCHEDULE, ARGV[1])
redis.call('RPUSH', READY, ARGV[3])
return 1
