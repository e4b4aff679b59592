-- queue_set: create or replace a queue's config (SlotLedger.new / reconfigure).
--
-- KEYS  1 configs   2 buckets   3 the queue's holders (kept as they are)
-- ARGV  1 name   2 config JSON (queue_config_to_json)   3 now us ('' = server TIME)
-- A new queue's bucket starts full; a new config keeps the held slots and refills the
-- bucket under the old rate first; a new rate starts full, a changed one keeps its
-- tokens (capped at the new count).
-- #include clock
-- #include ledger

local name = ARGV[1]
local now = clock(ARGV[3])
local new = cjson.decode(ARGV[2])
local new_rate = rate_of(new)
local old = ledger_config(name)
local tokens, at = 0, now
if old then
  tokens, at = bucket(name)
  tokens = refill_bucket(old, tokens, at, now)
  if new_rate then
    if rate_of(old) then
      tokens = math.min(tokens, new_rate.count)
    else
      tokens = new_rate.count
    end
  end
elseif new_rate then
  tokens = new_rate.count
end
redis.call('HSET', KEYS[1], name, ARGV[2])
store_bucket(name, tokens, now)
return 'OK'
