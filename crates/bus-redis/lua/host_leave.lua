-- A host stopped gracefully: its heartbeat record goes.
-- KEYS: info hash, seen sorted set. ARGV: host id. Returns 1 if it was there.
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
