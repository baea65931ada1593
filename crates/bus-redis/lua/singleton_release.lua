-- Gives a singleton processor's lease up only if this holder has it.
-- KEYS[1] lease (keys::singleton); ARGV[1] holder token.
-- Returns 1 when deleted, 0 when another holder has it (or nobody).
expect('singleton_release', 1, 1, 1)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
