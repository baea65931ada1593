-- Pushes a reply onto a requester's inbox and sets the inbox's expiry, in one step, so
-- that no reply sits in a list without one (docs/redis-layout.md, "Request and reply").
-- KEYS[1] inbox (keys::reply_inbox); ARGV[1] the reply's envelope, ARGV[2] keep in ms.
-- Returns 1.
expect('reply', 1, 2, 2, { 2 })
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
