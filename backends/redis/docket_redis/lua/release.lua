-- release_claim: the exact token gives the claim up; the run is due now.
--
-- KEYS  1 run   2 ready zset   3 claimed zset
-- ARGV  1 token   2 now us ('' = server TIME)   3 run_id   4 wake channel
-- #include clock

local held = redis.call('HGET', KEYS[1], 'token')
if not held or held ~= ARGV[1] then
  return {'NOOP'}
end
local _, now_s = clock(ARGV[2])
redis.call('HDEL', KEYS[1], 'token', 'claimed')
redis.call('HSET', KEYS[1], 'wake', now_s)
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[2], now_s, ARGV[3])
redis.call('PUBLISH', ARGV[4], 'due')
return {'OK'}
