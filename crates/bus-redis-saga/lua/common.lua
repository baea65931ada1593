-- Shared by every saga script; prepended at compile time (see src/scripts.rs).
--
-- A saga is a hash with the fields `data` and `stamp`. Anything else at a saga's key
-- (a string of an older layout, a hash without a stamp) is reported, never touched.
--
-- Returns 'none' when the key does not exist, 'saga' and the current stamp when it is a
-- saga, or 'alien' and a description of what is there.
local function inspect(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    return 'none'
  end
  if kind ~= 'hash' then
    return 'alien', 'a ' .. kind .. ' value'
  end
  local stamp = redis.call('HGET', key, 'stamp')
  if not stamp then
    return 'alien', 'a hash without a stamp field'
  end
  return 'saga', stamp
end
