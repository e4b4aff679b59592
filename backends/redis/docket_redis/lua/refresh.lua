-- refresh_claim: the exact token moves claimed_at forward (never back).
--
-- KEYS  1 run   2 claimed zset (the scope's base one; the run's lane is found: lanes.lua)
-- ARGV  1 token   2 now us ('' = server TIME)   3 run_id
-- #include clock
-- #include lanes

local held = redis.call('HMGET', KEYS[1], 'token', 'claimed', 'q', 'p')
if not held[1] or held[1] ~= ARGV[1] or not tonumber(held[2]) then
  return {'LOST'}
end
local now, now_s = clock(ARGV[2])
if tonumber(held[2]) >= now then
  return {'OK', held[2]}
end
redis.call('HSET', KEYS[1], 'claimed', now_s)
-- a held claim is in its lane's claimed zset already, so the lane stays listed
local lane = lane_of(held[3], held[4])
local claimed = KEYS[2]
if lane ~= '' then claimed = claimed .. ':' .. lane end
redis.call('ZADD', claimed, now_s, ARGV[3])
return {'OK', now_s}
