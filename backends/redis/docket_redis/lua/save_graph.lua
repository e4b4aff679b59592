-- save_graph: store a graph document under its content hash, once per owner scope.
-- A re-save of the same bytes keeps the first published_at.
--
-- KEYS  1 graph documents (hash: 'd:<hash>' -> bytes, 'p:<hash>' -> published us)
--       2 version index (lex zset of '<time key>:<hash>')
-- ARGV  1 graph_hash   2 canonical bytes   3 now us ('' = server TIME)
--       4 time key of ARGV[3] (when given)
local stored = redis.call('HMGET', KEYS[1], 'd:' .. ARGV[1], 'p:' .. ARGV[1])
if stored[1] then
  if stored[1] ~= ARGV[2] then
    return {'CONFLICT'}
  end
  return {'OK', stored[2]}
end
local now_s = ARGV[3]
local time_key = ARGV[4]
if now_s == '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now_s = string.format('%.0f', now)
  time_key = '1' .. string.format('%019.0f', now)
end
redis.call('HSET', KEYS[1], 'd:' .. ARGV[1], ARGV[2], 'p:' .. ARGV[1], now_s)
redis.call('ZADD', KEYS[2], 0, time_key .. ':' .. ARGV[1])
return {'OK', now_s}
