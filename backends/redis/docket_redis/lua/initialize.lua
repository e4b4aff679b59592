-- initialize: create a run, its first wake and its first events, all or nothing; or
-- (initialize_claimed, a claim token given) create it already claimed by that token.
--
-- Every check returns before the first write (a Lua error would not roll back):
-- the graph version must exist in the owner's scope, then the run id must be free
-- there (a replay of the same transition_id answers the stored run instead).
--
-- KEYS  1 graph documents   2 run          3 transitions    4 event bodies
--       5 event index       6 ready zset   7 summaries      8 run index
--       9 run index of status 'running'   10 run index of the graph id
--      11 run index of the graph hash     12 claimed zset
--      13 runs by oldest written commit   14 the run's commits by written time
--      15 finished runs by end time (layout 4: retention)
-- ARGV  1 graph field ('d:' .. graph_hash)   2 transition_id   3 digest
--       4 run document   5 graph_id   6 graph_hash   7 status   8 checkpoint_seq
--       9 event_seq   10 started_at us   11 wake_at us   12 now us ('' = server TIME)
--      13 wake channel   14 index member   15 summary   16 run_id   17 checkpoint type
--      18 listing order   19 claim token ('' = none)   20 number of events, then
--      (seq, body, digest) per event, then (layout 5) the run's queue and priority
--      (stored in the run hash unless 'default' and 0; see lanes.lua), then the two
--      feed arguments
-- A claim token stores the run as claim_take leases one: held by the token, claimed at
-- wake_at (in the claimed zset, not the ready one), its first attempt counted, no wake,
-- and nothing announced (nothing is due).
-- On a single server (not a cluster, where these keys live on other slots) the caller
-- folds the scope registration in, saving a call: KEYS 16 scope registry (set)
-- 17 order counter, and ARGV 18 is then the scope's key part; the listing order is
-- taken here, only once every check has passed.
-- #include doc_pieces
-- #include clock
-- #include feed
-- #include lanes

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {'NOT_FOUND_GRAPH'}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local digest = redis.call('HGET', KEYS[3], ARGV[2])
  if digest == ARGV[3] then
    return {'REPLAY', read_doc(KEYS[2])}
  end
  if digest then
    return {'TX_CONFLICT', digest}
  end
  return {'EXISTS'}
end

-- every check passed: publish
local order = ARGV[18]
if #KEYS >= 17 then
  redis.call('SADD', KEYS[16], ARGV[18])
  order = tostring(redis.call('INCR', KEYS[17]))
end
local token = ARGV[19]
local due = {'wake', ARGV[11], 'attempts', '0'}
if token ~= '' then  -- as claim_take leases it
  due = {'token', token, 'claimed', ARGV[11], 'attempts', '1'}
end
write_doc(KEYS[2], ARGV[4])
redis.call('HSET', KEYS[2],
  'graph_id', ARGV[5], 'graph_hash', ARGV[6], 'status', ARGV[7],
  'cseq', ARGV[8], 'eseq', ARGV[9], 'started', ARGV[10],
  'abandons', '0', 'ct', ARGV[17], 'ord', order, unpack(due))
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
local n = tonumber(ARGV[20])
local queue, priority = ARGV[21 + 3 * n], ARGV[22 + 3 * n]
local lane = lane_of(queue, priority)
if lane ~= '' then
  redis.call('HSET', KEYS[2], 'q', queue, 'p', priority)
end
for i = 0, n - 1 do
  local seq = ARGV[21 + 3 * i]
  redis.call('HSET', KEYS[4], seq, ARGV[22 + 3 * i], 'd' .. seq, ARGV[23 + 3 * i])
  redis.call('ZADD', KEYS[5], seq, seq)
end
local ready, claimed = lane_keys(KEYS[6], KEYS[12], lane)
if token == '' then
  redis.call('ZADD', ready, ARGV[11], ARGV[16])
else
  redis.call('ZADD', claimed, ARGV[11], ARGV[16])
end
lane_sync(KEYS[6], KEYS[12], lane)
redis.call('HSET', KEYS[7], ARGV[16], order .. '|' .. ARGV[15])
for k = 8, 11 do
  redis.call('ZADD', KEYS[k], 0, ARGV[14])
end
local now, now_s = clock(ARGV[12])
written(KEYS[13], KEYS[14], ARGV[16], 1, tonumber(ARGV[9]), now_s)
finished(KEYS[15], ARGV[16], ARGV[7], nil, now_s)
if token == '' and tonumber(ARGV[11]) <= now then
  redis.call('PUBLISH', ARGV[13], 'due')
end
notice(ARGV[#ARGV - 1], 1, ARGV[#ARGV])
return {'OK'}
