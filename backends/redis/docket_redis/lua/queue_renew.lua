-- queue_renew: SlotLedger.renew — move the expiry of the holders still held.
--
-- KEYS  1 configs   2 buckets   3 the queue's holders
-- ARGV  1 name   2 now us ('' = server TIME)   3 ttl us   4.. holder ids
-- returns how many were still held (an expired or released slot is not revived)
-- #include clock
-- #include ledger

local now = clock(ARGV[2])
live(now)
local expires = string.format('%.0f', now + tonumber(ARGV[3]))
local held = 0
for i = 4, #ARGV do
  if redis.call('ZSCORE', KEYS[3], ARGV[i]) then
    redis.call('ZADD', KEYS[3], 'XX', expires, ARGV[i])
    held = held + 1
  end
end
return held
