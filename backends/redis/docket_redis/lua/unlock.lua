-- unlock: delete a lock key only while it still holds this holder's token.
--
-- KEYS  1 the lock   ARGV  1 the token
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
