-- admit_finish: AdmissionBook.finish — forget the admitted ones of the run ids, then
-- promote in the same step.
--
-- KEYS  as admission.lua
-- ARGV  1 name   2 now us ('' = TIME)   3.. run ids
-- returns the promoted {run_id, meta, start}, in promotion order
-- #include clock
-- #include ledger
-- #include admission

local name = ARGV[1]
local config = ledger_config(name)
if not config then return {} end
for i = 3, #ARGV do
  local raw = redis.call('HGET', KEYS[4], ARGV[i])
  if raw then
    local state, priority, seq, _, tkey = parse_meta(raw)
    if state == 'A' then forget(ARGV[i], state, priority, seq, tkey, name) end
  end
end
local _, now_text = clock(ARGV[2])
return promote(config, now_text)
