-- Takes a singleton processor's lease, or extends it if this holder already has it.
-- KEYS[1] lease (keys::singleton); ARGV[1] holder token, ARGV[2] ttl in ms.
-- Returns 1 when the holder has the lease for ttl from now, 0 when another holds it.
expect('singleton_acquire', 1, 2, 2, { 2 })
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
