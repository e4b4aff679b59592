-- prune_runs: delete one scope's runs that finished before a cut, with their events,
-- transition records, retention entries and listing entries.
--
-- KEYS  1 finished runs by end time   2 runs by oldest written commit   3 ready zset
--       4 claimed zset   5 summaries   6 run index; then per run (8 keys from 7 + 8*i):
--       run, transitions, event bodies, event index, its commits by written time,
--       run index of its status, of its graph id, of its graph hash
-- ARGV  1 cut us (exclusive)   then per run (6 from 2 + 6*i): run_id, status, graph_id,
--       graph_hash, started us — as prune_peek read them — and its index member
-- A run is deleted only when it is still terminal, still as read (its keys were named
-- from that), and ended before the cut: a run reopened meanwhile is left alone. Answers
-- the number of runs deleted. A run is taken out of its own lane's zsets (lanes.lua).
-- #include lanes
local TERMINAL = {done = true, failed = true, cancelled = true}
local deleted = 0
local runs = (#ARGV - 1) / 6
for i = 0, runs - 1 do
  local a = 2 + 6 * i
  local k = 7 + 8 * i
  local run_id = ARGV[a]
  local ended = redis.call('ZSCORE', KEYS[1], run_id)
  local row = redis.call('HMGET', KEYS[k], 'status', 'graph_id', 'graph_hash', 'started',
    'q', 'p')
  if ended and tonumber(ended) < tonumber(ARGV[1]) and TERMINAL[row[1]]
      and row[1] == ARGV[a + 1] and row[2] == ARGV[a + 2] and row[3] == ARGV[a + 3]
      and row[4] == ARGV[a + 4] then
    redis.call('DEL', KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4])
    redis.call('ZREM', KEYS[1], run_id)
    redis.call('ZREM', KEYS[2], run_id)
    local lane = lane_of(row[5], row[6])
    local ready, claimed = lane_keys(KEYS[3], KEYS[4], lane)
    redis.call('ZREM', ready, run_id)
    redis.call('ZREM', claimed, run_id)
    lane_sync(KEYS[3], KEYS[4], lane)
    redis.call('HDEL', KEYS[5], run_id)
    local member = ARGV[a + 5]
    redis.call('ZREM', KEYS[6], member)
    redis.call('ZREM', KEYS[k + 5], member)
    redis.call('ZREM', KEYS[k + 6], member)
    redis.call('ZREM', KEYS[k + 7], member)
    deleted = deleted + 1
  end
end
return deleted
