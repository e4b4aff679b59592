-- The queue ledger's rules (layout 5), mirroring docket/contract/queues.py's SlotLedger
-- operation for operation, so every answer equals the reference's: the same floating
-- point steps in the same order (Lua numbers are doubles, as Python floats are).
--
-- Keys (one hash tag, so one cluster slot): KEYS[1] configs (name -> config JSON),
-- KEYS[2] buckets (name -> '<tokens> <refilled_at us>'), KEYS[3] the queue's holders
-- (zset holder -> expires_at us). A slot counts at its expires_at and is free strictly
-- after it.
local TOKEN_EPSILON = 1e-9

-- the stored config as a table, {} for the unconfigured default queue, nil if unknown
local function ledger_config(name)
  local raw = redis.call('HGET', KEYS[1], name)
  if raw then return cjson.decode(raw) end
  if name == 'default' then return {} end
  return nil
end

local function rate_of(config)
  local rate = config.rate
  if type(rate) ~= 'table' then return nil end
  return rate
end

local function per_second(rate)
  return rate.count / (rate.period_ms / 1000)
end

-- tokens, refilled_at (nil when the queue never had a bucket)
local function bucket(name)
  local raw = redis.call('HGET', KEYS[2], name)
  if not raw then return 0, nil end
  local tokens, at = string.match(raw, '^(%S+) (%S+)$')
  return tonumber(tokens), tonumber(at)
end

local function store_bucket(name, tokens, at)
  redis.call('HSET', KEYS[2], name, string.format('%.17g', tokens) .. ' ' ..
    string.format('%.0f', at))
end

-- refill(): the bucket at now, never above count; a clock that went back refills nothing
local function refill(rate, tokens, at, now)
  local elapsed = (now - at) / 1000000
  if elapsed <= 0 then return math.min(rate.count, tokens) end
  return math.min(rate.count, tokens + elapsed * per_second(rate))
end

-- SlotLedger._refill: tokens, refilled_at
local function refill_bucket(config, tokens, at, now)
  local rate = rate_of(config)
  if rate and at then
    return refill(rate, tokens, at, now), math.max(at, now)
  end
  return tokens, at
end

-- SlotLedger.live: drop expired slots; the number still held
local function live(now)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%.0f', now))
  return redis.call('ZCARD', KEYS[3])
end
