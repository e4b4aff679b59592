-- register: remember an owner scope (claim_due and list_runs(SYSTEM) visit every
-- registered scope) and hand out the next listing order number.
--
-- KEYS  1 scope registry (set)   2 order counter
-- ARGV  1 the scope's key part   2 '1' to also take an order number
redis.call('SADD', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
  return redis.call('INCR', KEYS[2])
end
return 0
