-- Retention indexes and the feed's commit notice (included by initialize and commit).
--
-- written: the events first..last a commit wrote, at now, as one member of the run's
-- commit zset; the scope's zset keeps the run at its oldest such commit (ZADD LT).
-- finished: a terminal run is indexed by the time it (last) became terminal, any other
-- leaves the index (a failed run reopened).
-- notice: PUBLISH the commit notice (docket.records.feed_item_to_json: canonical JSON, so
-- "first_seq" is its first key and the caller sends the rest, from its first comma).
local TERMINAL = {done = true, failed = true, cancelled = true}

local function written(scope_key, run_key, run_id, first, last, now_s)
  if last < first then
    return
  end
  redis.call('ZADD', run_key, now_s, first .. ':' .. last)
  redis.call('ZADD', scope_key, 'LT', now_s, run_id)
end

local function finished(key, run_id, status, was, now_s)
  if TERMINAL[status] then
    redis.call('ZADD', key, now_s, run_id)
  elseif was and TERMINAL[was] then
    redis.call('ZREM', key, run_id)
  end
end

local function notice(channel, first, rest)
  redis.call('PUBLISH', channel, '{"first_seq":' .. string.format('%d', first) .. rest)
end
