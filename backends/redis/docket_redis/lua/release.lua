-- release_claim: the exact token gives the claim up; the run is due now.
--
-- KEYS  1 run   2 ready zset   3 claimed zset (the scope's base ones: lanes.lua)
-- ARGV  1 token   2 now us ('' = server TIME)   3 run_id   4 wake channel
-- #include clock
-- #include lanes

local held = redis.call('HGET', KEYS[1], 'token')
if not held or held ~= ARGV[1] then
  return {'NOOP'}
end
local _, now_s = clock(ARGV[2])
redis.call('HDEL', KEYS[1], 'token', 'claimed')
redis.call('HSET', KEYS[1], 'wake', now_s)
local lane = run_lane(KEYS[1])
local ready, claimed = lane_keys(KEYS[2], KEYS[3], lane)
redis.call('ZREM', claimed, ARGV[3])
redis.call('ZADD', ready, now_s, ARGV[3])
lane_sync(KEYS[2], KEYS[3], lane)
redis.call('PUBLISH', ARGV[4], 'due')
return {'OK'}
