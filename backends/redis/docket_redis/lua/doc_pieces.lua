-- Run documents in pieces (included by the scripts that read or write one).
--
-- A run hash keeps its document's first DOC_PIECE bytes in 'doc'; a longer document keeps
-- the number of pieces in 'pieces' and the rest in 'doc2', 'doc3', ... A write rewrites
-- only the pieces whose bytes changed, so appending to a long list field costs the server
-- (and its AOF) about one piece per commit, not the whole document. A 'doc' without
-- 'pieces' is a whole document (how layout 1 stored every one).
local DOC_PIECE = 8192

local function read_doc(key)
  local head = redis.call('HMGET', key, 'doc', 'pieces')
  local n = tonumber(head[2])
  if not head[1] or not n or n < 2 then
    return head[1]
  end
  local names = {}
  for i = 2, n do
    names[i - 1] = 'doc' .. i
  end
  local rest = redis.call('HMGET', key, unpack(names))
  local parts = {head[1]}
  for i = 1, #rest do
    if not rest[i] then
      return ''  -- a lost piece: an empty document, which never decodes (corruption)
    end
    parts[i + 1] = rest[i]
  end
  return table.concat(parts)
end

local function drop_pieces(key, n, stored)
  for i = n + 1, stored do
    redis.call('HDEL', key, 'doc' .. i)
  end
  if n > 1 then
    if stored ~= n then
      redis.call('HSET', key, 'pieces', tostring(n))
    end
  elseif stored > 1 then
    redis.call('HDEL', key, 'pieces')
  end
end

-- The whole document: every piece written.
local function write_doc(key, doc)
  local n = math.max(1, math.ceil(#doc / DOC_PIECE))
  local stored = tonumber(redis.call('HGET', key, 'pieces')) or 1
  for i = 1, n do
    local field = 'doc'
    if i > 1 then
      field = 'doc' .. i
    end
    redis.call('HSET', key, field, string.sub(doc, (i - 1) * DOC_PIECE + 1, i * DOC_PIECE))
  end
  drop_pieces(key, n, stored)
end

-- Only the pieces that changed, against a base the caller knows: the document of the
-- checkpoint the commit is fenced on, which the fence has just proved is the one stored
-- (only a transition writes a document, and each checkpoint has one). ``base`` is that
-- document's number of pieces, checked by pieces_match first; ``n`` the new number;
-- ARGV[at..] holds ``count`` (index, bytes) pairs.
local function pieces_match(key, base)
  return redis.call('HGET', key, 'pieces') == base
end

local function patch_doc(key, base, n, at, count)
  for j = 0, count - 1 do
    local i = tonumber(ARGV[at + 2 * j])
    local field = 'doc'
    if i > 1 then
      field = 'doc' .. i
    end
    redis.call('HSET', key, field, ARGV[at + 2 * j + 1])
  end
  drop_pieces(key, n, tonumber(base))
end
