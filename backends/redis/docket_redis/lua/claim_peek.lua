-- claim_peek: the oldest due candidates of one owner scope (reads only).
--
-- Ready runs are in the ready zset scored by wake time; claimed runs in the claimed
-- zset scored by claim time. Equal scores come back ordered by run id, which is the
-- contract's tie-break. A claim exactly at the TTL boundary is not expired, hence the
-- exclusive bound.
--
-- KEYS  1 ready zset   2 claimed zset
-- ARGV  1 now us ('' = server TIME)   2 orphan TTL us   3 how many of each class
-- #include clock

local now, now_s = clock(ARGV[1])
local cutoff = string.format('%.0f', now - tonumber(ARGV[2]))
local ready = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_s, 'WITHSCORES', 'LIMIT', 0, ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. cutoff, 'WITHSCORES',
  'LIMIT', 0, ARGV[3])
return {now_s, ready, expired}
