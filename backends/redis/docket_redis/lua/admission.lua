-- The admission ledger's rules (Feature.ADMISSION), mirroring docket/contract/admission.py
-- (AdmissionBook) step for step, so every answer equals the memory reference's.
-- Include after `ledger` (its ledger_config reads the config queue_set.lua writes).
--
-- Keys (the queue hash tag, so one cluster slot; see docket_redis/keys.py):
-- KEYS[1] configs   KEYS[2] seqs (name -> last seq)   KEYS[3] where (run_id -> queues)
-- KEYS[4] the queue's entries (run_id -> meta)   KEYS[5] its starts (run_id -> bytes)
-- KEYS[6] its held zset (held_member, one score: lexical = promotion order)
-- KEYS[7] its admitted zset (run_id -> seq)   KEYS[8] its tenant counts
-- ('a' .. tenant key -> admitted, 'h' .. tenant key -> held; absent = 0)
--
-- An entry's meta is '<A|H> <priority> <seq> <at us> <tenant key>', the tenant key
-- '-' (no tenant) or 't' .. tenant id (last: an id may hold spaces).

-- promote() examines at most this many held starts per call (tenants at their cap are
-- skipped, so a long run of them could otherwise make one script walk everything).
local PROMOTE_WALK = 1000
-- where held_member's run id starts (3 + 20 digits before it)
local MEMBER_HEAD = 23

-- admits(): whether one more start fits the queue's and its tenant's caps
local function admits(config, admitted, tenant_admitted)
  local limit = config.admission_limit
  if type(limit) == 'number' and admitted >= limit then return false end
  limit = config.tenant_admission_limit
  return type(limit) ~= 'number' or tenant_admitted < limit
end

local function at_queue_cap(config, admitted)
  local limit = config.admission_limit
  return type(limit) == 'number' and admitted >= limit
end

-- promotion_key() (-priority, seq) as a string whose lexical order is that tuple's:
-- priorities are -100..100, so 100 - priority is 0..200 in three digits
local function held_member(priority, seq, run_id)
  return string.format('%03d', 100 - priority) .. string.format('%020.0f', seq) .. run_id
end

local function entry_meta(state, priority, seq, at, tkey)
  return state .. ' ' .. string.format('%d', priority) .. ' ' .. string.format('%.0f', seq) ..
    ' ' .. at .. ' ' .. tkey
end

-- state, priority, seq, at text, tenant key of a stored meta
local function parse_meta(raw)
  local state, priority, seq, at, tkey = string.match(raw, '^(%a) (%S+) (%S+) (%S+) (.*)$')
  return state, tonumber(priority), tonumber(seq), at, tkey
end

local function tenant_count(kind, tkey)
  return tonumber(redis.call('HGET', KEYS[8], kind .. tkey) or '0')
end

local function bump(kind, tkey, by)
  if redis.call('HINCRBY', KEYS[8], kind .. tkey, by) <= 0 then
    redis.call('HDEL', KEYS[8], kind .. tkey)
  end
end

-- the where index: run_id -> the queues whose ledger has it (space-separated; a queue
-- name holds no space), for held_start
local function where_add(run_id, name)
  local raw = redis.call('HGET', KEYS[3], run_id)
  if not raw then
    redis.call('HSET', KEYS[3], run_id, name)
    return
  end
  for queue in string.gmatch(raw, '%S+') do
    if queue == name then return end
  end
  redis.call('HSET', KEYS[3], run_id, raw .. ' ' .. name)
end

local function where_remove(run_id, name)
  local raw = redis.call('HGET', KEYS[3], run_id)
  if not raw then return end
  local rest = {}
  for queue in string.gmatch(raw, '%S+') do
    if queue ~= name then table.insert(rest, queue) end
  end
  if #rest == 0 then
    redis.call('HDEL', KEYS[3], run_id)
  else
    redis.call('HSET', KEYS[3], run_id, table.concat(rest, ' '))
  end
end

-- forget one entry of the queue (admitted or held) in every key
local function forget(run_id, state, priority, seq, tkey, name)
  redis.call('HDEL', KEYS[4], run_id)
  redis.call('HDEL', KEYS[5], run_id)
  if state == 'H' then
    redis.call('ZREM', KEYS[6], held_member(priority, seq, run_id))
    bump('h', tkey, -1)
  else
    redis.call('ZREM', KEYS[7], run_id)
    bump('a', tkey, -1)
  end
  where_remove(run_id, name)
end

-- AdmissionBook.promote: walk held starts in promotion order, skipping a start whose
-- tenant is at its cap, stopping at the queue's cap; answers {run_id, meta, start} each
local function promote(config, now_text)
  local out = {}
  local admitted = redis.call('ZCARD', KEYS[7])
  if at_queue_cap(config, admitted) then return out end
  local counts = {}
  for _, member in ipairs(redis.call('ZRANGE', KEYS[6], 0, PROMOTE_WALK - 1)) do
    if at_queue_cap(config, admitted) then break end
    local run_id = string.sub(member, MEMBER_HEAD + 1)
    local _, priority, seq, _, tkey = parse_meta(redis.call('HGET', KEYS[4], run_id))
    local tenant_admitted = counts[tkey] or tenant_count('a', tkey)
    if admits(config, admitted, tenant_admitted) then
      local meta = entry_meta('A', priority, seq, now_text, tkey)
      redis.call('ZREM', KEYS[6], member)
      redis.call('ZADD', KEYS[7], seq, run_id)
      redis.call('HSET', KEYS[4], run_id, meta)
      bump('h', tkey, -1)
      bump('a', tkey, 1)
      admitted = admitted + 1
      tenant_admitted = tenant_admitted + 1
      table.insert(out, {run_id, meta, redis.call('HGET', KEYS[5], run_id)})
    end
    counts[tkey] = tenant_admitted
  end
  return out
end
