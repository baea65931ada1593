-- KEYS: ready, processing, deadlines, recoveries; ARGV: now (s), batch.
-- Returns how many moved.
return sweep(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2]))
