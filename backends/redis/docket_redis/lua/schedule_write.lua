-- schedule_write: create, update (fenced) or delete one schedule, indexes and all.
--
-- Python works out the exact document (docket.contract.schedules); this script is the
-- atomic part. An update is fenced on the document it was decided on: its SHA-1 must
-- still be the stored one's (the version, and the created_at it keeps, were read from
-- that document), else CHANGED and the caller reads again. Checks come before writes.
--
-- KEYS  1 documents (hash)   2 index of all (zset)   3 index of the owner (zset)
--       4 due (zset)
-- ARGV  1 'create' | 'update' | 'delete'   2 member   3 document   4 due_at us
--       ('' = not due: paused or done)   5 (update) SHA-1 of the document read
local mode, member = ARGV[1], ARGV[2]
local stored = redis.call('HGET', KEYS[1], member)
if mode == 'create' then
  if stored then
    return {'EXISTS'}
  end
elseif not stored then
  return {'NOT_FOUND'}
elseif mode == 'update' and redis.sha1hex(stored) ~= ARGV[5] then
  return {'CHANGED'}
end

if mode == 'delete' then
  redis.call('HDEL', KEYS[1], member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZREM', KEYS[4], member)
  return {'OK'}
end
redis.call('HSET', KEYS[1], member, ARGV[3])
redis.call('ZADD', KEYS[2], 0, member)
redis.call('ZADD', KEYS[3], 0, member)
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[4], member)
else
  redis.call('ZADD', KEYS[4], ARGV[4], member)
end
return {'OK'}
