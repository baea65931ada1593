-- Shared by the batch scripts, prepended at compile time (src/scripts.rs): Redis's clock,
-- and the rule that decides which staged callbacks a batch sends now.

-- Redis's clock, in ms since the Unix epoch.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Appends the staged callback of `kind` to `out` (kind, queue, message id, envelope) and
-- records that it fired; nothing when the batch has no callback of that kind.
local function fire_kind(BATCH, CALLBACKS, kind, out)
  local staged = redis.call('HGET', BATCH, 'cb:' .. kind)
  if not staged then
    return
  end
  local sp = string.find(staged, ' ', 1, true)
  redis.call('HSET', BATCH, 'fired:' .. kind, 1)
  out[#out + 1] = kind
  out[#out + 1] = string.sub(staged, 1, sp - 1)
  out[#out + 1] = string.sub(staged, sp + 1)
  out[#out + 1] = redis.call('HGET', CALLBACKS, kind)
end

-- The callbacks that fire now, after a flag: 1 when the batch finished with this call, else
-- 0. `death` fires at the first dead member (once); once every member
-- of a closed batch settled, `success` (none dead) or `complete` (some dead), and
-- `continuation`; with the policy `fail`, `continuation` at the first dead member. The
-- batch then leaves the state `open` (`fired`), so nothing fires twice.
local function fire(BATCH, CALLBACKS)
  local b = redis.call('HMGET', BATCH, 'state', 'total', 'ok', 'dead', 'closed', 'policy', 'death')
  local out = { 0 }
  if b[1] ~= 'open' then
    return out
  end
  local total, ok, dead = tonumber(b[2]), tonumber(b[3]), tonumber(b[4])
  if dead > 0 and not b[7] then
    redis.call('HSET', BATCH, 'death', 1)
    fire_kind(BATCH, CALLBACKS, 'death', out)
  end
  local outcome
  if b[6] == 'fail' and dead > 0 then
    outcome = 'failed'
  elseif b[5] == '1' and ok + dead >= total then
    if dead == 0 then outcome = 'success' else outcome = 'complete' end
  end
  if outcome then
    out[1] = 1
    redis.call('HSET', BATCH, 'state', 'fired', 'outcome', outcome, 'fired', now_ms())
    if outcome ~= 'failed' then
      fire_kind(BATCH, CALLBACKS, outcome, out)
    end
    fire_kind(BATCH, CALLBACKS, 'continuation', out)
  end
  return out
end

-- Why a finished batch failed, as its parent's member records it ('' when it succeeded).
local function failure(outcome, dead, total)
  if outcome == 'success' then
    return ''
  end
  return dead .. ' of ' .. total .. ' members of the child batch were dead-lettered'
end

-- The fired callbacks of BATCH not recorded as sent, as fire returns them.
local function unsent(BATCH, CALLBACKS)
  local out = {}
  for _, kind in ipairs({ 'success', 'complete', 'death', 'continuation' }) do
    if redis.call('HEXISTS', BATCH, 'fired:' .. kind) == 1
        and redis.call('HEXISTS', BATCH, 'sent:' .. kind) == 0 then
      local staged = redis.call('HGET', BATCH, 'cb:' .. kind)
      local sp = string.find(staged, ' ', 1, true)
      out[#out + 1] = kind
      out[#out + 1] = string.sub(staged, 1, sp - 1)
      out[#out + 1] = string.sub(staged, sp + 1)
      out[#out + 1] = redis.call('HGET', CALLBACKS, kind)
    end
  end
  return out
end

-- Refuses a call whose repeated ARGV (from `first`) do not come in groups of `size`, or
-- whose member indices (at `at` in each group, from 0) are not decimal integers.
local function expect_groups(name, first, size, at)
  if (#ARGV - first + 1) % size ~= 0 then
    error({ err = 'ERR bus: ' .. name .. ' expects its repeated ARGV in groups of ' .. size .. ' (docs/wire-format.md, "Workflows")' })
  end
  for i = first + at, #ARGV, size do
    if not string.find(ARGV[i], '^%d+$') then
      error({ err = 'ERR bus: ' .. name .. ' expects a member index as ARGV[' .. i .. '] (docs/wire-format.md, "Workflows")' })
    end
  end
end
