-- latest_event: the highest retained event of a run (a visible run may have none).
--
-- KEYS  1 run   2 event index   3 event bodies
local exists = redis.call('EXISTS', KEYS[1])
if exists == 0 then
  return {'NOT_FOUND'}
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1)
if not last[1] then
  return {'NONE'}
end
return {'OK', last[1], redis.call('HGET', KEYS[3], last[1]) or ''}
