-- One tick of a recurring schedule: store its message only if the tick is newer than the
-- last one stored for the schedule (a catch-up: only if there is a last one), and record
-- it as the last; the check, the record and the push are one step, so hosts racing with
-- one tick store it once (docs/redis-layout.md, "Recurring messages (cron)").
-- KEYS: schedule (QueueKeys::schedule), ready.
-- ARGV: tick_ms, catch_up ('1' or ''), envelope.
-- Returns 1 when stored, 0 when not (nothing written).
expect('send_tick', 2, 3, 3, { 1 })
if ARGV[2] ~= '' and ARGV[2] ~= '1' then
  refuse('send_tick', string.format("expects '1' or nothing as ARGV[2], got %s", shown(2)))
end
local last = redis.call('GET', KEYS[1])
if last then
  if tonumber(last) >= tonumber(ARGV[1]) then return 0 end
elseif ARGV[2] == '1' then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[3])
return 1
