-- claim_peek: the oldest due candidates of one owner scope (reads only).
--
-- Ready runs are in the ready zsets scored by wake time; claimed runs in the claimed
-- zsets scored by claim time. Equal scores come back ordered by run id, which is the
-- contract's tie-break. A claim exactly at the TTL boundary is not expired, hence the
-- exclusive bound. Each lane (queue, priority; lanes.lua) is read apart, up to the demand
-- per class: claim_due merges them in priority order, so no lane needs more.
--
-- KEYS  1 ready zset   2 claimed zset (the scope's base lane: default queue, priority 0)
--       3 the scope's set of other lanes in use
-- ARGV  1 now us ('' = server TIME)   2 orphan TTL us   3 how many of each class
--       4 '*' for every queue, or the wanted queues, one per further argument
-- returns {now, base ready, base expired, {lane, ready, expired} per other lane read}
-- #include clock

local now, now_s = clock(ARGV[1])
local cutoff = '(' .. string.format('%.0f', now - tonumber(ARGV[2]))
local every = ARGV[4] == '*'
local wanted = {}
if not every then
  for i = 4, #ARGV do wanted[ARGV[i]] = true end
end

local function peek(ready, claimed)
  return redis.call('ZRANGEBYSCORE', ready, '-inf', now_s, 'WITHSCORES', 'LIMIT', 0, ARGV[3]),
    redis.call('ZRANGEBYSCORE', claimed, '-inf', cutoff, 'WITHSCORES', 'LIMIT', 0, ARGV[3])
end

local out = {now_s, {}, {}}
if every or wanted['default'] then
  out[2], out[3] = peek(KEYS[1], KEYS[2])
end
for _, lane in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  -- '<queue>:<priority>': a queue name may hold ':', the priority never does
  local queue = string.match(lane, '^(.*):[^:]*$')
  if every or wanted[queue] then
    local ready, expired = peek(KEYS[1] .. ':' .. lane, KEYS[2] .. ':' .. lane)
    if #ready > 0 or #expired > 0 then
      table.insert(out, {lane, ready, expired})
    end
  end
end
return out
