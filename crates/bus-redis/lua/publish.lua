-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):
if #KEYS < 1 then error({ err = 'ERR bus: publish expects at least 1 KEYS, got ' .. #KEYS .. ' (docs/wire-format.md, "The calls")' }) end
if #ARGV < 1 then error({ err = 'ERR bus: publish expects at least 1 ARGV (s), got ' .. #ARGV .. ' (docs/wire-format.md, "The calls")' }) end
for _, i in ipairs({ 1 }) do
  if not string.find(ARGV[i], '^%-?%d+$') then error({ err = 'ERR bus: publish expects an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. ' (docs/wire-format.md, "The calls")' }) end
end
local SUBS = KEYS[1]
-- (end of the generated shape)
-- Publish: a copy of every event to every subscription of the topic, all or none.
-- After `subs`, the KEYS are the ready list of each valid subscription, in the order of
-- ARGV's names (names that would break the key layout receive nothing and have no key).
-- ARGV: S, name_1 .. name_S (every name read), envelope, envelope, ...
-- Returns the number of ready lists written, or -1 when the caller's list of names is
-- not the current set.
if tonumber(ARGV[1]) < 0 or #ARGV < 1 + tonumber(ARGV[1]) or #KEYS < 1 or #KEYS > 1 + tonumber(ARGV[1]) then
  refuse('publish', string.format('expects 1 + at most S KEYS and S names (S = %s), got %d KEYS, %d ARGV',
    ARGV[1], #KEYS, #ARGV))
end
local s = tonumber(ARGV[1])
if redis.call('SCARD', SUBS) ~= s then return -1 end
for k = 1, s do
  if redis.call('SISMEMBER', SUBS, ARGV[1 + k]) == 0 then return -1 end
end
local envelopes = {}
for i = s + 2, #ARGV do envelopes[#envelopes + 1] = ARGV[i] end
for k = 2, #KEYS do
  bulk('RPUSH', KEYS[k], envelopes)
end
return #KEYS - 1
