-- admit_promote: AdmissionBook.promote — promote held starts while the limits allow.
--
-- KEYS  as admission.lua
-- ARGV  1 name   2 now us ('' = TIME)
-- returns the promoted {run_id, meta, start}, in promotion order
-- #include clock
-- #include ledger
-- #include admission

local config = ledger_config(ARGV[1])
if not config then return {} end
local _, now_text = clock(ARGV[2])
return promote(config, now_text)
