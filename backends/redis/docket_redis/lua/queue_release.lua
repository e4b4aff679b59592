-- queue_release: SlotLedger.release — free the holders still held; a refund puts their
-- tokens back (capped at the bucket's size).
--
-- KEYS  1 configs   2 buckets   3 the queue's holders
-- ARGV  1 name   2 now us ('' = server TIME)   3 refund '1' | '0'   4.. holder ids
-- #include clock
-- #include ledger

local name = ARGV[1]
local now = clock(ARGV[2])
live(now)
local freed = 0
for i = 4, #ARGV do
  freed = freed + redis.call('ZREM', KEYS[3], ARGV[i])
end
local config = ledger_config(name)
local rate = config and rate_of(config)
if ARGV[3] == '1' and rate and freed > 0 then
  local tokens, at = bucket(name)
  tokens, at = refill_bucket(config, tokens, at, now)
  store_bucket(name, math.min(rate.count, tokens + freed), at or now)
end
return freed
