-- abandon_claim: a hand-back before any work, by the exact token at the expected
-- checkpoint. Reschedules (retry_at, or an exponential backoff when non-poisoning) or,
-- past max_claim_abandons, poisons. Checks return before the first write.
--
-- KEYS  1 run   2 ready zset   3 claimed zset (the scope's base ones: lanes.lua)
-- ARGV  1 token   2 expected checkpoint_seq   3 now us   4 max claim abandons
--       5 non-poisoning '1' | '0'   6 backoff base us ('' = none)   7 backoff cap us
--       8 retry_at us   9 run_id   10 wake channel   11 poison reason
-- #include lanes
local held = redis.call('HMGET', KEYS[1], 'token', 'cseq', 'attempts', 'abandons', 'q', 'p')
if not held[1] or held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then
  return {'STALE'}
end
local attempts = tonumber(held[3])
local old = tonumber(held[4])
if not attempts or not old then
  return {'CORRUPT', 'the stored run lacks its claim counters'}
end
local now_s = ARGV[3]
local now = tonumber(now_s)
local remaining = string.format('%d', math.max(attempts - 1, 0))
local run_id = ARGV[9]
local lane = lane_of(held[5], held[6])
local ready, claimed = lane_keys(KEYS[2], KEYS[3], lane)

redis.call('HDEL', KEYS[1], 'token', 'claimed')
redis.call('ZREM', claimed, run_id)
if ARGV[5] ~= '1' and old >= tonumber(ARGV[4]) then
  redis.call('HDEL', KEYS[1], 'wake')
  redis.call('HSET', KEYS[1], 'attempts', remaining, 'poisoned', now_s, 'preason', ARGV[11])
  redis.call('ZREM', ready, run_id)
  lane_sync(KEYS[2], KEYS[3], lane)
  return {'POISONED', now_s}
end
local wake_s = ARGV[8]
if ARGV[5] == '1' and ARGV[6] ~= '' then
  local delay = math.min(tonumber(ARGV[6]) * 2 ^ math.min(old, 30), tonumber(ARGV[7]))
  wake_s = string.format('%.0f', now + delay)
end
redis.call('HSET', KEYS[1], 'attempts', remaining, 'abandons', string.format('%d', old + 1),
  'wake', wake_s)
redis.call('ZADD', ready, wake_s, run_id)
lane_sync(KEYS[2], KEYS[3], lane)
redis.call('PUBLISH', ARGV[10], 'due')
return {'RESCHEDULED', wake_s}
