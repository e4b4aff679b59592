-- admit: AdmissionBook.admit — admit or hold one start; a known run id answers its state.
--
-- KEYS  as admission.lua
-- ARGV  1 name   2 run_id   3 tenant key   4 priority   5 start   6 now us ('' = TIME)
-- returns 'A' (admitted) | 'H' (held); nil for an unknown queue (nothing stored)
-- #include clock
-- #include ledger
-- #include admission

local name, run_id, tkey = ARGV[1], ARGV[2], ARGV[3]
local config = ledger_config(name)
if not config then return false end
local known = redis.call('HGET', KEYS[4], run_id)
if known then return string.sub(known, 1, 1) end
local _, now_text = clock(ARGV[6])
local priority = tonumber(ARGV[4])
local seq = redis.call('HINCRBY', KEYS[2], name, 1)
local waiting = tenant_count('h', tkey) > 0  -- a new start never overtakes its tenant
local state = 'H'
if not waiting and admits(config, redis.call('ZCARD', KEYS[7]), tenant_count('a', tkey)) then
  state = 'A'
  redis.call('ZADD', KEYS[7], seq, run_id)
  bump('a', tkey, 1)
else
  redis.call('ZADD', KEYS[6], 0, held_member(priority, seq, run_id))
  bump('h', tkey, 1)
end
redis.call('HSET', KEYS[4], run_id, entry_meta(state, priority, seq, now_text, tkey))
redis.call('HSET', KEYS[5], run_id, ARGV[5])
where_add(run_id, name)
return state
