-- list_runs: walk one run index of one owner scope newest first, keeping summaries
-- that pass the remaining filters. Bounded work per call: at most ARGV[3] index
-- entries are looked at; the answer says where to resume.
--
-- Index members are '<time key of started_at>:<run_id>' with one score, so lexical
-- order is (started_at, run_id). Summaries are '<order>|<json>'.
--
-- KEYS  1 the index   2 summaries
-- ARGV  1 start bound ('+' or '(' .. member)   2 how many matches are wanted
--       3 most entries to look at   4 graph_id filter ('' = none)
--       5 graph_hash filter ('' = none)   6 statuses filter (',' joined; '' = none)
local want = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local statuses = nil
if ARGV[6] ~= '' then
  statuses = {}
  for status in string.gmatch(ARGV[6], '[^,]+') do statuses[status] = true end
end
local filtered = ARGV[4] ~= '' or ARGV[5] ~= '' or statuses ~= nil

local out = {}
local bound = ARGV[1]
local looked = 0
while #out < 2 * want and looked < budget do
  local page = math.min(budget - looked, 100)
  local members = redis.call('ZRANGE', KEYS[1], bound, '-', 'BYLEX', 'REV', 'LIMIT', 0, page)
  if #members == 0 then
    return {'DONE', bound, out}
  end
  for _, member in ipairs(members) do
    looked = looked + 1
    bound = '(' .. member
    local run_id = string.sub(member, 22)
    local summary = redis.call('HGET', KEYS[2], run_id)
    if summary then
      local keep = true
      if filtered then
        local fields = cjson.decode(string.sub(summary, string.find(summary, '|', 1, true) + 1))
        keep = (ARGV[4] == '' or fields['g'] == ARGV[4])
          and (ARGV[5] == '' or fields['h'] == ARGV[5])
          and (statuses == nil or statuses[fields['s']] == true)
      end
      if keep then
        table.insert(out, run_id)
        table.insert(out, summary)
        if #out >= 2 * want then
          return {'MORE', bound, out}
        end
      end
    end
  end
  if #members < page then
    return {'DONE', bound, out}
  end
end
return {'MORE', bound, out}
