-- Fixed window with INCR and an expiry: the Lua twin of RL.FIXEDWINDOW, for
-- `make bench`.
--
-- EVALSHA <sha> 1 key limit window_s [cost]
--   limit: the most allowed in one window; window_s: the window in seconds,
--   aligned to the Unix epoch; cost: what this request counts (default 1).
-- State: the key is the count of the current window, and expires at its end.
-- A denial counts nothing.
-- Replies like RL.FIXEDWINDOW:
--   {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3] or '1')

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window_end = (math.floor(now / window) + 1) * window

local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if cost <= limit and used + cost <= limit then
  used = redis.call('INCRBY', KEYS[1], cost)
  if used == cost then
    redis.call('PEXPIREAT', KEYS[1], window_end)
  end
  return {1, limit, limit - used, 0, window_end - now}
end
local retry = -1
if cost <= limit then
  retry = window_end - now
end
return {0, limit, math.max(limit - used, 0), retry, window_end - now}
