-- set_layout: move a namespace's layout version from ARGV[1] to ARGV[2], only if it
-- still holds ARGV[1] (a concurrent migrate, or a newer release, wins untouched).
--
-- KEYS  1 schema key
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
