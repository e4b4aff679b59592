-- admit_find: the entries of one run id (held or admitted) of one tenant, in every
-- queue whose ledger has it (the caller takes the first queue by name, as the reference
-- does); reads only.
--
-- KEYS  1 where (run_id -> queues)
-- ARGV  1 run_id   2 tenant key   3 the entries keys' head   4 the starts keys' head
-- (head + queue name = key; all under the queue hash tag)
-- returns {name, meta, start} per queue whose entry is of that tenant

local run_id, tkey = ARGV[1], ARGV[2]
local raw = redis.call('HGET', KEYS[1], run_id)
local out = {}
if not raw then return out end
for name in string.gmatch(raw, '%S+') do
  local meta = redis.call('HGET', ARGV[3] .. name, run_id)
  if meta and string.match(meta, '^%a %S+ %S+ %S+ (.*)$') == tkey then
    table.insert(out, {name, meta, redis.call('HGET', ARGV[4] .. name, run_id)})
  end
end
return out
