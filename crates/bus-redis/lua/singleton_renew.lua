-- Extends a singleton processor's lease only if this holder still has it.
-- KEYS[1] lease (keys::singleton); ARGV[1] holder token, ARGV[2] ttl in ms.
-- Returns 1 when extended, 0 when the lease expired or another holder took it.
expect('singleton_renew', 1, 2, 2, { 2 })
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
