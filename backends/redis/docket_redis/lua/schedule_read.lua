-- schedule_read: one page of a schedule index with the documents, read at one instant.
--
-- 'list' walks a lexical index (every schedule, or one owner's) after a bound; 'due'
-- takes the due zset up to now, oldest due_at first (equal scores in member order,
-- which is the listing order).
--
-- KEYS  1 the index   2 documents (hash)
-- ARGV  1 'list' | 'due'   2 list: start bound ('-' or '(' .. member); due: now us
--       ('' = server TIME)   3 how many
-- #include clock

local members
if ARGV[1] == 'list' then
  members = redis.call('ZRANGE', KEYS[1], ARGV[2], '+', 'BYLEX', 'LIMIT', 0, ARGV[3])
else
  local _, now_s = clock(ARGV[2])
  members = redis.call('ZRANGE', KEYS[1], '-inf', now_s, 'BYSCORE', 'LIMIT', 0, ARGV[3])
end
local out = {}
for i, member in ipairs(members) do
  out[i] = redis.call('HGET', KEYS[2], member) or false
end
return out
