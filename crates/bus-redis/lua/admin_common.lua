-- Prepended to every admin script after common.lua (see scripts.rs): the helpers of the
-- dead-letter operations.

-- The rest of the shape check of a call that selects dead letters: ARGV 'all', max or
-- 'ids', id...
local function expect_selection(script)
  if ARGV[1] == 'all' then
    expect(script, nil, 2, 2, { 2 })
  elseif ARGV[1] ~= 'ids' then
    refuse(script, string.format("expects 'all' or 'ids' as ARGV[1], got %s", shown(1)))
  end
end

-- The dead letters a call works on: with ARGV 'all', max, the first `max` ids popped from
-- the head of the dead list; with ARGV 'ids', id..., those ids found in it (LREM, linear
-- in the list's length: fine for management, never on a hot path).
-- `keep(id)` says whether an id may leave the list (its envelope is stored); dead ids that
-- may not stay in the list (popped ones go back to its tail) and are returned as skipped.
-- Ids that are not in the dead list are in neither result.
local function take_dead(dead, keep)
  local taken, skipped = {}, {}
  if ARGV[1] == 'all' then
    local popped = redis.call('LPOP', dead, tonumber(ARGV[2])) or {}
    for _, id in ipairs(popped) do
      if keep(id) then taken[#taken + 1] = id else skipped[#skipped + 1] = id end
    end
    bulk('RPUSH', dead, skipped)
  else
    for i = 2, #ARGV do
      local id = ARGV[i]
      if keep(id) then
        if redis.call('LREM', dead, 1, id) > 0 then taken[#taken + 1] = id end
      elseif redis.call('LPOS', dead, id) then
        skipped[#skipped + 1] = id
      end
    end
  end
  return taken, skipped
end
