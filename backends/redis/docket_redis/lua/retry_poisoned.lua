-- retry_poisoned_run: clear a poisoned run's poison and counters; due now.
--
-- KEYS  1 run   2 ready zset   3 claimed zset (the scope's base ones: lanes.lua)
-- ARGV  1 now us ('' = server TIME)   2 run_id   3 wake channel
-- #include doc_pieces
-- #include clock
-- #include lanes

local stored = redis.call('HMGET', KEYS[1], 'cseq', 'status', 'poisoned')  -- cseq: it exists
if not stored[1] then
  return {'NOT_FOUND'}
end
local status = stored[2]
if status == 'done' or status == 'failed' or status == 'cancelled' then
  return {'INACTIVE'}
end
if not stored[3] then
  return {'OK', read_doc(KEYS[1])}
end
local _, now_s = clock(ARGV[1])
redis.call('HDEL', KEYS[1], 'poisoned', 'preason', 'token', 'claimed')
redis.call('HSET', KEYS[1], 'attempts', '0', 'abandons', '0', 'wake', now_s)
local lane = run_lane(KEYS[1])
local ready, claimed = lane_keys(KEYS[2], KEYS[3], lane)
redis.call('ZREM', claimed, ARGV[2])
redis.call('ZADD', ready, now_s, ARGV[2])
lane_sync(KEYS[2], KEYS[3], lane)
redis.call('PUBLISH', ARGV[3], 'due')
return {'OK', read_doc(KEYS[1])}
