-- claim_take: lease (or poison) the candidates claim_due chose in one owner scope.
--
-- claim_due chooses across scopes from claim_peek's answers; by the time this runs a
-- competing claimer may have taken a candidate, so each one is checked again under the
-- same rules (still ready: wake <= now; still expired: claimed_at < now - TTL) and
-- skipped if it no longer qualifies. All checks come before the first write. Each run is
-- looked for in its own lane's zsets (lanes.lua).
--
-- KEYS  1 ready zset   2 claimed zset (the scope's base ones)   3.. the run of each
--       candidate, in ARGV order
-- ARGV  1 now us ('' = server TIME)   2 orphan TTL us   3 max claim attempts
--       4 poison reason   then (run_id, class 'ready' | 'expired', fresh token) each
-- #include doc_pieces
-- #include clock
-- #include lanes

local now, now_s = clock(ARGV[1])
local cutoff = now - tonumber(ARGV[2])
local max_attempts = tonumber(ARGV[3])
local count = #KEYS - 2

-- checks
local plan = {}
local lanes = {}
for i = 1, count do
  local run_id = ARGV[2 + 3 * i]
  local class = ARGV[3 + 3 * i]
  local row = redis.call('HMGET', KEYS[2 + i], 'attempts', 'q', 'p')
  local lane = lane_of(row[2], row[3])
  local ready, claimed = lane_keys(KEYS[1], KEYS[2], lane)
  local ok = false
  if class == 'ready' then
    local score = redis.call('ZSCORE', ready, run_id)
    ok = score and tonumber(score) <= now
  else
    local score = redis.call('ZSCORE', claimed, run_id)
    ok = score and tonumber(score) < cutoff
  end
  local attempts = nil
  if ok then
    attempts = tonumber(row[1])
    if not attempts then
      return {'CORRUPT', run_id}
    end
  end
  plan[i] = attempts
  lanes[i] = lane
end

-- writes
local out = {'OK', now_s}
for i = 1, count do
  local run = KEYS[2 + i]
  local run_id = ARGV[2 + 3 * i]
  local attempts = plan[i]
  local ready, claimed = lane_keys(KEYS[1], KEYS[2], lanes[i])
  if not attempts then
    table.insert(out, {run_id, 'skipped'})
  elseif attempts < max_attempts then
    local token = ARGV[4 + 3 * i]
    local attempt = string.format('%d', attempts + 1)
    redis.call('HSET', run, 'token', token, 'claimed', now_s, 'attempts', attempt)
    redis.call('HDEL', run, 'wake')
    redis.call('ZREM', ready, run_id)
    redis.call('ZADD', claimed, now_s, run_id)
    -- the document too, so the drain that follows need not read it back
    local fields = redis.call('HMGET', run, 'graph_id', 'graph_hash', 'cseq')
    table.insert(out, {run_id, 'leased', token, attempt, fields[1], fields[2], fields[3],
      read_doc(run)})
  else
    redis.call('HDEL', run, 'token', 'claimed', 'wake')
    redis.call('HSET', run, 'poisoned', now_s, 'preason', ARGV[4])
    redis.call('ZREM', ready, run_id)
    redis.call('ZREM', claimed, run_id)
    lane_sync(KEYS[1], KEYS[2], lanes[i])
    table.insert(out, {run_id, 'poisoned'})
  end
end
return out
