-- Publish: a copy of every event to every subscription of the topic, all or none.
-- KEYS: subs, then the ready list of each subscription, in the order of ARGV's names.
-- ARGV: S, name_1 .. name_S, envelope, envelope, ...
-- Returns S, or -1 when the caller's list of subscriptions is not the current one.
local s = tonumber(ARGV[1])
if redis.call('SCARD', KEYS[1]) ~= s then return -1 end
for k = 1, s do
  if redis.call('SISMEMBER', KEYS[1], ARGV[1 + k]) == 0 then return -1 end
end
local envelopes = {}
for i = s + 2, #ARGV do envelopes[#envelopes + 1] = ARGV[i] end
for k = 1, s do
  bulk('RPUSH', KEYS[1 + k], envelopes)
end
return s
