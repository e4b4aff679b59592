-- prune_peek: what prune_runs needs to name a run's keys (all of one scope).
--
-- KEYS  the run hashes
-- Answers, per run: status, graph_id, graph_hash, started (nil for a run gone meanwhile).
local out = {}
for i = 1, #KEYS do
  local row = redis.call('HMGET', KEYS[i], 'status', 'graph_id', 'graph_hash', 'started')
  for j = 1, 4 do
    table.insert(out, row[j] or '')
  end
end
return out
