-- backfill (migrate to layout 4): index existing runs for retention, as if their events
-- were written, and the finished ones ended, now — later than they really were, so
-- retention can only keep them longer than their age asks, never delete one early.
--
-- KEYS  1 runs by oldest written commit   2 finished runs by end time, then per run
--       (3 keys from 3 + 3*i): run, event index, its commits by written time
-- ARGV  1 now us   2.. the run ids
-- Idempotent: a run already indexed is left as it is.
local TERMINAL = {done = true, failed = true, cancelled = true}
for i = 2, #ARGV do
  local run_id = ARGV[i]
  local k = 3 + 3 * (i - 2)
  local status = redis.call('HGET', KEYS[k], 'status')
  if status then
    if TERMINAL[status] then
      redis.call('ZADD', KEYS[2], 'NX', ARGV[1], run_id)
    end
    local first = redis.call('ZRANGE', KEYS[k + 1], 0, 0)
    local last = redis.call('ZRANGE', KEYS[k + 1], -1, -1)
    if first[1] and redis.call('EXISTS', KEYS[k + 2]) == 0 then
      redis.call('ZADD', KEYS[k + 2], ARGV[1], first[1] .. ':' .. last[1])
      redis.call('ZADD', KEYS[1], 'LT', ARGV[1], run_id)
    end
  end
end
return 'OK'
