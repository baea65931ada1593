-- Delayed send: store envelopes and schedule their ids.
-- KEYS: delayed, msgs, ready.  ARGV: due_ms, id, envelope, id, envelope, ...
-- Like send, a re-sent batch (first id already stored) stores nothing. The i-th message
-- of a batch is due i microseconds after the first (common.lua's store_delayed).
expect('send_at', 3, 1, nil, { 1 })
return #store_delayed('send_at', KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), 2)
