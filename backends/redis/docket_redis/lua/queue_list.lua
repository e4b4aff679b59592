-- queue_list: every configured queue (and 'default') with its live slots (reads only).
--
-- KEYS  1 configs
-- ARGV  1 now us ('' = server TIME)   2 the holders keys' common head (+ name = key)
--       3, 4 the admitted and held zsets' heads (Feature.ADMISSION; same tag)
-- returns {name, config JSON (false: the unconfigured default), live, admitted, held}
-- per queue
-- #include clock

local now, now_s = clock(ARGV[1])
local flat = redis.call('HGETALL', KEYS[1])
local out = {}
local seen_default = false
local function add(name, raw)
  table.insert(out, {name, raw, redis.call('ZCOUNT', ARGV[2] .. name, now_s, '+inf'),
    redis.call('ZCARD', ARGV[3] .. name), redis.call('ZCARD', ARGV[4] .. name)})
end
for i = 1, #flat, 2 do
  if flat[i] == 'default' then seen_default = true end
  add(flat[i], flat[i + 1])
end
if not seen_default then add('default', false) end
return out
