-- admit_drop: AdmissionBook.drop — remove a held (not admitted) start.
--
-- KEYS  as admission.lua
-- ARGV  1 name   2 run_id
-- returns {run_id, meta, start}, or nil when the queue holds no such start
-- #include admission

local run_id = ARGV[2]
local raw = redis.call('HGET', KEYS[4], run_id)
if not raw then return false end
local state, priority, seq, _, tkey = parse_meta(raw)
if state ~= 'H' then return false end
local start = redis.call('HGET', KEYS[5], run_id)
forget(run_id, state, priority, seq, tkey, ARGV[1])
return {run_id, raw, start}
