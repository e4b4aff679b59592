-- commit: commit_claimed (a token is given) and commit_unclaimed (no token).
--
-- The checks run in the contract's order and every one of them returns before the
-- first write (a Lua error would not roll back): lookup, replay of the transition id,
-- immutable identity, the fences, event sequence discipline, re-sent event content.
--
-- KEYS  1 run   2 transitions   3 event bodies   4 event index   5 ready zset
--       6 claimed zset   7 summaries   8..12 run index by status (running, waiting,
--       done, failed, cancelled)   13 runs by oldest written commit   14 the run's
--       commits by written time   15 finished runs by end time (layout 4: retention)
-- ARGV  1 transition_id   2 digest   3 expected checkpoint_seq   4 claim token ('' =
--       unclaimed)   5 graph_id   6 graph_hash   7 started_at us   8 run document
--       9 status   10 checkpoint_seq   11 event_seq   12 checkpoint type
--      13 schedule: retain | immediate | at | none   14 wake us (for 'at')
--      15 now us ('' = server TIME)   16 wake channel   17 index member   18 summary
--      19 run_id   20 number of events, then (seq, body, digest) per event, ascending
--      A document sent as changed pieces (see doc_pieces.lua) leaves ARGV 8 empty and
--      follows the events with: base number of pieces, new number of pieces, count,
--      then (piece index, bytes) per changed piece
--      The last two ARGV: the feed channel and the commit notice's canonical JSON after
--      its first field (see feed.lua): announced once the commit is written.
-- The run moves within its own lane (KEYS 5 and 6 are the scope's base zsets; lanes.lua):
-- a commit never changes a run's queue or priority.
-- #include doc_pieces
-- #include feed
local STATUS_KEY = {running = 8, waiting = 9, done = 10, failed = 11, cancelled = 12}

-- #include clock
-- #include lanes

local run = KEYS[1]
local run_id = ARGV[19]

-- 2. lookup
if redis.call('EXISTS', run) == 0 then
  return {'NOT_FOUND'}
end
-- 3. replay
local recorded = redis.call('HGET', KEYS[2], ARGV[1])
if recorded then
  if recorded == ARGV[2] then
    return {'REPLAY', read_doc(run)}
  end
  return {'TX_CONFLICT', recorded}
end
-- 4. immutable identity
local stored = redis.call('HMGET', run, 'graph_id', 'graph_hash', 'started', 'cseq', 'token',
  'eseq', 'status', 'claimed', 'ord', 'q', 'p')
if not (STATUS_KEY[stored[7]] and STATUS_KEY[ARGV[9]] and stored[9] and tonumber(stored[6])) then
  return {'CORRUPT', 'the stored run lacks its status, order or event sequence'}
end
if stored[1] ~= ARGV[5] or stored[2] ~= ARGV[6] or stored[3] ~= ARGV[7] then
  return {'IDENTITY', stored[1], stored[2], stored[3]}
end
-- 5. fences
if stored[4] ~= ARGV[3] or (ARGV[4] ~= '' and stored[5] ~= ARGV[4]) then
  return {'STALE'}
end
-- the pieces the document is sent against must be the ones stored
local patch_at = 21 + 3 * tonumber(ARGV[20])
if ARGV[8] == '' and not pieces_match(run, ARGV[patch_at]) then
  return {'REPATCH'}
end
-- 6. event sequence discipline, then re-sent content
local stored_seq = tonumber(stored[6])
local proposed_seq = tonumber(ARGV[11])
if proposed_seq < stored_seq then
  return {'SPLIT', stored[6]}
end
local n = tonumber(ARGV[20])
local expect = stored_seq + 1
for i = 0, n - 1 do
  local seq = tonumber(ARGV[21 + 3 * i])
  if seq > stored_seq then
    if seq ~= expect then
      return {'SPLIT', stored[6]}
    end
    expect = expect + 1
  end
end
if expect ~= proposed_seq + 1 then
  return {'SPLIT', stored[6]}
end
for i = 0, n - 1 do
  local seq = ARGV[21 + 3 * i]
  if tonumber(seq) <= stored_seq then
    local digest = redis.call('HGET', KEYS[3], 'd' .. seq)
    if digest and digest ~= ARGV[23 + 3 * i] then
      return {'EVENT_CONFLICT', seq}
    end
  end
end

-- 7. publish: every check passed
local now, now_s = clock(ARGV[15])
if ARGV[8] == '' then
  patch_doc(run, ARGV[patch_at], tonumber(ARGV[patch_at + 1]), patch_at + 3,
    tonumber(ARGV[patch_at + 2]))
else
  write_doc(run, ARGV[8])
end
redis.call('HSET', run, 'status', ARGV[9], 'cseq', ARGV[10],
  'eseq', ARGV[11], 'ct', ARGV[12], 'attempts', '0', 'abandons', '0')
redis.call('HDEL', run, 'poisoned', 'preason')
local lane = lane_of(stored[10], stored[11])
local ready, claimed = lane_keys(KEYS[5], KEYS[6], lane)
local schedule = ARGV[13]
local wake = nil
local wake_s = nil
if schedule == 'retain' then
  local since = tonumber(stored[8])
  local claimed_s = now_s
  if since and since >= now then claimed_s = stored[8] end
  redis.call('HSET', run, 'claimed', claimed_s)
  redis.call('HDEL', run, 'wake')
  redis.call('ZREM', ready, run_id)
  redis.call('ZADD', claimed, claimed_s, run_id)
else
  redis.call('HDEL', run, 'token', 'claimed')
  redis.call('ZREM', claimed, run_id)
  if schedule == 'immediate' then
    wake, wake_s = now, now_s
  elseif schedule == 'at' then
    wake, wake_s = tonumber(ARGV[14]), ARGV[14]
  end
  if wake then
    redis.call('HSET', run, 'wake', wake_s)
    redis.call('ZADD', ready, wake_s, run_id)
  else
    redis.call('HDEL', run, 'wake')
    redis.call('ZREM', ready, run_id)
  end
end
lane_sync(KEYS[5], KEYS[6], lane)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
for i = 0, n - 1 do
  local seq = ARGV[21 + 3 * i]
  if tonumber(seq) > stored_seq then
    redis.call('HSET', KEYS[3], seq, ARGV[22 + 3 * i], 'd' .. seq, ARGV[23 + 3 * i])
    redis.call('ZADD', KEYS[4], seq, seq)
  end
end
written(KEYS[13], KEYS[14], run_id, stored_seq + 1, proposed_seq, now_s)
finished(KEYS[15], run_id, ARGV[9], stored[7], now_s)
redis.call('HSET', KEYS[7], run_id, stored[9] .. '|' .. ARGV[18])
redis.call('ZREM', KEYS[STATUS_KEY[stored[7]]], ARGV[17])
redis.call('ZADD', KEYS[STATUS_KEY[ARGV[9]]], 0, ARGV[17])
if wake and wake <= now then
  redis.call('PUBLISH', ARGV[16], 'due')
end
notice(ARGV[#ARGV - 1], stored_seq + 1, ARGV[#ARGV])
return {'OK'}
