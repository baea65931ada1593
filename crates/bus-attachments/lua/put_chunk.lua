-- Appends one chunk of an attachment and (re)sets the data list's expiry in the same
-- step, so that no chunk is ever stored without its backstop TTL.
-- KEYS[1] data list; ARGV[1] chunk bytes; ARGV[2] TTL in milliseconds.
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
