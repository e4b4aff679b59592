-- refresh_claim: the exact token moves claimed_at forward (never back).
--
-- KEYS  1 run   2 claimed zset
-- ARGV  1 token   2 now us ('' = server TIME)   3 run_id
-- #include clock

local held = redis.call('HMGET', KEYS[1], 'token', 'claimed')
if not held[1] or held[1] ~= ARGV[1] or not tonumber(held[2]) then
  return {'LOST'}
end
local now, now_s = clock(ARGV[2])
if tonumber(held[2]) >= now then
  return {'OK', held[2]}
end
redis.call('HSET', KEYS[1], 'claimed', now_s)
redis.call('ZADD', KEYS[2], now_s, ARGV[3])
return {'OK', now_s}
