-- Lanes (layout 5): where a run waits, by its queue and priority.
--
-- A run of the default queue at priority 0 (and every run written before layout 5, which
-- has neither field) uses the scope's own ready / claimed zsets, so existing data never
-- moves and plain claims read what they always read. Any other (queue, priority) pair is
-- a lane '<queue>:<priority>' with zsets '<ready>:<lane>' / '<claimed>:<lane>' in the
-- same hash tag (so on the same cluster slot), listed in the set '<tag>:lanes' while
-- either of its zsets holds a run. The run hash keeps 'q' and 'p' (written at initialize
-- when not the defaults, never changed after), so every script that moves a run finds
-- its lane from the run itself.
local function lane_of(q, p)
  q = q or 'default'
  p = p or '0'
  if q == 'default' and p == '0' then return '' end
  return q .. ':' .. p
end

local function run_lane(run)
  local qp = redis.call('HMGET', run, 'q', 'p')
  return lane_of(qp[1], qp[2])
end

-- the lane's ready and claimed zsets, from the scope's base ones
local function lane_keys(ready, claimed, lane)
  if lane == '' then return ready, claimed end
  return ready .. ':' .. lane, claimed .. ':' .. lane
end

-- the scope's set of lanes in use, from its ready zset's name ('<tag>:ready')
local function lanes_set(ready)
  return string.sub(ready, 1, -6) .. 'lanes'
end

-- after moving a run in or out of a lane: list the lane while it holds a run
local function lane_sync(ready, claimed, lane)
  if lane == '' then return end
  if redis.call('EXISTS', ready .. ':' .. lane, claimed .. ':' .. lane) > 0 then
    redis.call('SADD', lanes_set(ready), lane)
  else
    redis.call('SREM', lanes_set(ready), lane)
  end
end
