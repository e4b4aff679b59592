-- The script's clock (included by the scripts that stamp or compare times).
--
-- A time comes in ARGV as microseconds, or '' for the server's own TIME (the clock of
-- the primary holding the script's slot). Answers the time as a number and as the text
-- the keys store (an integer, never an exponent).
local function clock(given)
  if given ~= '' then return tonumber(given), given end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return now, string.format('%.0f', now)
end
