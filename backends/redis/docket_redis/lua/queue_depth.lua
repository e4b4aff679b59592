-- queue_depth: one scope's due, unclaimed runs per queue (reads only; list_queues).
--
-- KEYS  1 ready zset (the base lane: default queue, priority 0)   2 the scope's lanes
-- ARGV  1 now us ('' = server TIME)
-- returns {queue, count, ...} (a queue may repeat, once per priority)
-- #include clock

local now, now_s = clock(ARGV[1])
local out = {'default', redis.call('ZCOUNT', KEYS[1], '-inf', now_s)}
for _, lane in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  table.insert(out, string.match(lane, '^(.*):[^:]*$'))
  table.insert(out, redis.call('ZCOUNT', KEYS[1] .. ':' .. lane, '-inf', now_s))
end
return out
