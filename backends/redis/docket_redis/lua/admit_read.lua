-- admit_read: AdmissionBook.view — admitted starts by seq and held ones in promotion
-- order, at most `limit` of each (reads only).
--
-- KEYS  as admission.lua
-- ARGV  1 limit
-- returns {admitted, held}, each a list of {run_id, meta, start}
-- #include admission

local limit = tonumber(ARGV[1])
local function entries(ids)
  local out = {}
  for _, run_id in ipairs(ids) do
    table.insert(out, {run_id, redis.call('HGET', KEYS[4], run_id),
      redis.call('HGET', KEYS[5], run_id)})
  end
  return out
end
local held = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[6], 0, limit - 1)) do
  table.insert(held, string.sub(member, MEMBER_HEAD + 1))
end
return {entries(redis.call('ZRANGE', KEYS[7], 0, limit - 1)), entries(held)}
