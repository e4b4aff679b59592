-- list_events: one page of a run's events, the retained bounds and the run's
-- event_seq, all from one snapshot.
--
-- KEYS  1 run   2 event index (zset seq -> seq)   3 event bodies
-- ARGV  1 after seq   2 limit
local latest = redis.call('HGET', KEYS[1], 'eseq')
if not latest then
  return {'NOT_FOUND'}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
local last = redis.call('ZRANGE', KEYS[2], -1, -1)
local seqs = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'LIMIT', 0, ARGV[2])
local out = {'OK', latest, first[1] or '', last[1] or ''}
for _, seq in ipairs(seqs) do
  table.insert(out, seq)
  table.insert(out, redis.call('HGET', KEYS[3], seq) or '')
end
return out
