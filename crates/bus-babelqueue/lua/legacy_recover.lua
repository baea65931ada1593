-- KEYS: ready, processing, deadlines; ARGV: now (s), batch. Returns how many moved.
return sweep(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]))
