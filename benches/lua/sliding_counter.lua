-- Sliding window counter with two counters: the Lua twin of
-- RL.SLIDINGCOUNTER (PRECISION 1), for `make bench`.
--
-- EVALSHA <sha> 1 key limit window_s [cost]
--   limit: the most requests in any window; window_s: the window in seconds;
--   cost: what this request counts (default 1).
-- State: the hash {w, cur, prev}: w is the index of the current fixed window
-- (Unix ms / window), cur its count, prev the count of window w - 1. The
-- estimate of a sliding window is prev weighted by how much of the previous
-- window it still overlaps, plus cur.
-- Replies like RL.SLIDINGCOUNTER:
--   {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3] or '1')

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local w = math.floor(now / window)

local state = redis.call('HMGET', KEYS[1], 'w', 'cur', 'prev')
local stored_w = tonumber(state[1])
local cur, prev = 0, 0
if stored_w == w then
  cur, prev = tonumber(state[2]), tonumber(state[3])
elseif stored_w == w - 1 then
  prev = tonumber(state[2])
end

local elapsed = now - w * window
local used = prev * (window - elapsed) / window + cur
-- The key is as good as new once its newest request has slid out: at the end
-- of the window after the current one.
local fresh_at = (w + 2) * window
if cost <= limit and used + cost <= limit then
  cur = cur + cost
  redis.call('HSET', KEYS[1], 'w', w, 'cur', cur, 'prev', prev)
  redis.call('PEXPIREAT', KEYS[1], fresh_at)
  return {1, limit, math.floor(limit - used - cost), 0, fresh_at - now}
end

local retry = -1
if cost <= limit then
  if cur + cost <= limit and prev > 0 then
    -- The previous window's weight must fall to (limit - cur - cost) / prev.
    local at = w * window + math.ceil(window * (1 - (limit - cur - cost) / prev))
    retry = math.max(at - now, 1)
  else
    -- The current count alone is too much: it has to become the previous
    -- window's, then fade enough.
    local at = (w + 1) * window + math.ceil(window * (1 - (limit - cost) / cur))
    retry = math.max(at - now, 1)
  end
end
local remaining = math.max(math.floor(limit - used), 0)
if stored_w == nil then
  fresh_at = now
end
return {0, limit, remaining, retry, fresh_at - now}
