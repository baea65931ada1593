-- Flow control (docs/redis-layout.md "Flow control"), prepended to the
-- reserve scripts after common.lua. A queue's `flow` hash holds its settings: `paused`
-- ("1"), `concurrency` (at most n in flight), `rate` and `per_ms` (at most `rate` starts
-- per `per_ms`, a sliding window kept in the `flow-starts` sorted set). Without the hash,
-- a reserve pays one HMGET on a missing key and nothing else.

-- Why a reserve took nothing, its reply's `pending` field (bus-redis's consumer.rs reads
-- it, and a test there checks this line against it): recovered messages wait to be
-- delivered alone; the queue is paused; full (its concurrency); rate-limited; the fleet
-- circuit breaker is open (or its probe runs), wait_ms until the next probe may go; the
-- cool-down is over: what this reply holds (at most one message) is the probe, and its
-- slot is held for one lock timeout.
local PENDING_SUSPECTS, PENDING_PAUSED, PENDING_FULL, PENDING_RATE, PENDING_BREAKER, PENDING_PROBE = 1, 2, 3, 4, 5, 6

-- How a rate limit's window counts a start: for its length and a margin (a tenth of it, at
-- most 50 ms; bus_core::flow::start_margin), since a start is counted at reserve and its
-- handler starts a little later, so that the limit holds at handler start.
local function rate_window(per)
  return per + math.min(50, math.floor(per / 10))
end

-- How many of `want` messages this reserve may take: `n, status, wait_ms, window, per_key,
-- probe`. Under a rate limit (the queue's or its keys') at most `start_now`: what the
-- consumer would start at once, so that none of them waits in a prefetch buffer.
-- n = 0 comes with a status (paused, full, rate) and, for the rate limit, the ms until a
-- start leaves the window. `window` (nil without a rate limit) is what flow_started needs.
-- `per_key` (nil: not ordered) is the `per_key` field as text: how many
-- messages of one key may be in flight ("0": ordering was switched off, the keys' lists
-- drain without a limit). `probe`: a fleet circuit breaker's cool-down is
-- over, so `n` is at most 1 and what is taken is the probe (flow_probe_taken).
local function flow_allowance(flow, starts, inflight, leased, want, start_now, now)
  local f = redis.call('HMGET', flow, 'paused', 'concurrency', 'rate', 'per_ms', 'per_key',
    'breaker_until', 'breaker_probe', 'key_rate')
  local per_key = f[5] or nil
  if f[8] then want = math.min(want, start_now) end
  if not (f[1] or f[2] or f[3] or f[6]) then return want, 0, -1, nil, per_key end
  if f[1] == '1' then return 0, PENDING_PAUSED, -1, nil, per_key end
  local probe = nil
  local tripped = tonumber(f[6])
  if tripped then
    -- Open until the cool-down ends and while another consumer's probe holds its slot.
    local next_probe = math.max(tripped, tonumber(f[7]) or 0)
    if now < next_probe then return 0, PENDING_BREAKER, next_probe - now, nil, per_key end
    probe, want = true, 1
  end
  local n = want
  local limit = tonumber(f[2])
  if limit then
    local busy = redis.call('ZCARD', inflight) + (tonumber(redis.call('GET', leased)) or 0)
    n = math.min(n, math.max(0, limit - busy))
    if n == 0 then return 0, PENDING_FULL, -1, nil, per_key, probe end
  end
  local rate, per = tonumber(f[3]), tonumber(f[4])
  if rate and per and rate > 0 and per > 0 then
    n = math.min(n, start_now)
    per = rate_window(per)
    redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - per)
    local free = rate - redis.call('ZCARD', starts)
    if free <= 0 then
      local oldest = redis.call('ZRANGE', starts, 0, 0, 'WITHSCORES')
      local wait = 1
      if #oldest > 0 then wait = math.max(1, tonumber(oldest[2]) + per - now + 1) end
      return 0, PENDING_RATE, wait, nil, per_key, probe
    end
    n = math.min(n, free)
    return n, 0, -1, per, per_key, probe
  end
  return n, 0, -1, nil, per_key, probe
end

-- After a reserve in probe mode (flow_allowance's `probe`): the reply's status. When it took
-- the probe (`taken` > 0), its slot is held for the reserving consumer's lock timeout, so
-- that no other consumer probes meanwhile and a probe whose host dies frees the slot when
-- its message's lock expires.
local function flow_probe_taken(flow, taken, now, lock_ms)
  if taken > 0 then redis.call('HSET', flow, 'breaker_probe', now + lock_ms) end
  return PENDING_PROBE
end

-- Records `n` starts at `now` in the rate limit's window (`per`: its length, from
-- flow_allowance; nil: no rate limit). Members are unique: `<now>:<counter>`.
local function flow_started(flow, starts, per, n, now)
  if not per or n == 0 then return end
  local last = redis.call('HINCRBY', flow, 'started', n)
  local items = {}
  for i = 1, n do
    items[#items + 1] = now
    items[#items + 1] = string.format('%d:%d', now, last - n + i)
  end
  bulk('ZADD', starts, items)
  redis.call('PEXPIRE', starts, per + 1000)
end
