-- queue_acquire: SlotLedger.acquire — grant the first n of the holders not already held.
--
-- KEYS  1 configs   2 buckets   3 the queue's holders
-- ARGV  1 name   2 now us ('' = server TIME)   3 ttl us   4.. holder ids (distinct)
-- returns n; an unknown queue grants nothing
-- #include clock
-- #include ledger

local name = ARGV[1]
local config = ledger_config(name)
if not config then return 0 end
local now, now_s = clock(ARGV[2])
local held = live(now)
local rate = rate_of(config)
local tokens, at = bucket(name)
tokens, at = refill_bucket(config, tokens, at, now)
local fresh = {}
for i = 4, #ARGV do
  if not redis.call('ZSCORE', KEYS[3], ARGV[i]) then
    table.insert(fresh, ARGV[i])
  end
end
-- grant()
local n = #fresh
if config.paused == true or n <= 0 then
  n = 0
else
  if type(config.execution_limit) == 'number' then
    n = math.min(n, config.execution_limit - held)
  end
  if rate then
    n = math.min(n, math.floor(tokens + TOKEN_EPSILON))
  end
  n = math.max(0, n)
end
local expires = string.format('%.0f', now + tonumber(ARGV[3]))
for i = 1, n do
  redis.call('ZADD', KEYS[3], expires, fresh[i])
end
if rate then
  store_bucket(name, tokens - n, at or now)
end
return n
