-- prune_events: delete up to a budget of one scope's events written before a cut.
--
-- KEYS  1 the scope's runs by oldest written commit, then per run: 3*i-1 its commits by
--       written time   3*i its event bodies   3*i+1 its event index
-- ARGV  1 cut us (exclusive: an event written exactly at the cut survives)   2 budget
--       3.. the run ids, in the order of their keys
-- A commit's member is '<first>:<last>' (the sequences it wrote); one cut short by the
-- budget keeps its score and the sequences left. The run's score in KEYS 1 follows its
-- oldest remaining commit. Answers the number of events deleted; the run's event_seq is
-- not touched (readers see the hole).
local budget = tonumber(ARGV[2])
local deleted = 0
for i = 3, #ARGV do
  if deleted >= budget then
    break
  end
  local run_id = ARGV[i]
  local base = 3 * (i - 3) + 2
  local commits, bodies, index = KEYS[base], KEYS[base + 1], KEYS[base + 2]
  local old = redis.call('ZRANGEBYSCORE', commits, '-inf', '(' .. ARGV[1], 'WITHSCORES',
    'LIMIT', 0, budget - deleted)
  for j = 1, #old, 2 do
    local member, score = old[j], old[j + 1]
    local sep = string.find(member, ':', 1, true)
    local seq = tonumber(string.sub(member, 1, sep - 1))
    local last = tonumber(string.sub(member, sep + 1))
    while seq <= last and deleted < budget do
      local name = string.format('%d', seq)
      if redis.call('ZREM', index, name) == 1 then
        redis.call('HDEL', bodies, name, 'd' .. name)
        deleted = deleted + 1
      end
      seq = seq + 1
    end
    redis.call('ZREM', commits, member)
    if seq <= last then
      redis.call('ZADD', commits, score, string.format('%d', seq) .. ':' .. last)
      break
    end
  end
  local rest = redis.call('ZRANGE', commits, 0, 0, 'WITHSCORES')
  if rest[1] then
    redis.call('ZADD', KEYS[1], rest[2], run_id)
  else
    redis.call('ZREM', KEYS[1], run_id)
  end
end
return deleted
