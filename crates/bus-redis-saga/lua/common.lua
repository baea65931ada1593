-- Shared by every saga script; prepended at compile time (see src/scripts.rs).
--
-- A saga is a hash with the fields `data` and `stamp`. Anything else at a saga's key
-- (a string of an older layout, a hash without a stamp) is reported, never touched.
--
-- Returns 'none' when the key does not exist, 'saga' and the current stamp when it is a
-- saga, or 'alien' and a description of what is there.
local function inspect(key)
  -- The fast path, one call: a saga's stamp. (pcall: on a key of another type HGET fails.)
  local stamp = redis.pcall('HGET', key, 'stamp')
  if type(stamp) == 'string' then
    return 'saga', stamp
  end
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    return 'none'
  end
  if kind ~= 'hash' then
    return 'alien', 'a ' .. kind .. ' value'
  end
  return 'alien', 'a hash without a stamp field'
end
