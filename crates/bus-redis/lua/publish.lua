-- Publish: a copy of every event to every subscription of the topic, all or none.
-- KEYS: subs, then the ready list of each valid subscription, in the order of ARGV's
-- names (names that would break the key layout receive nothing and have no key).
-- ARGV: S, name_1 .. name_S (every name read), envelope, envelope, ...
-- Returns the number of ready lists written, or -1 when the caller's list of names is
-- not the current set.
expect('publish', nil, 1, nil, { 1 })
if tonumber(ARGV[1]) < 0 or #ARGV < 1 + tonumber(ARGV[1]) or #KEYS < 1 or #KEYS > 1 + tonumber(ARGV[1]) then
  refuse('publish', string.format('expects 1 + at most S KEYS and S names (S = %s), got %d KEYS, %d ARGV',
    ARGV[1], #KEYS, #ARGV))
end
local s = tonumber(ARGV[1])
if redis.call('SCARD', KEYS[1]) ~= s then return -1 end
for k = 1, s do
  if redis.call('SISMEMBER', KEYS[1], ARGV[1 + k]) == 0 then return -1 end
end
local envelopes = {}
for i = s + 2, #ARGV do envelopes[#envelopes + 1] = ARGV[i] end
for k = 2, #KEYS do
  bulk('RPUSH', KEYS[k], envelopes)
end
return #KEYS - 1
