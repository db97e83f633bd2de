-- Sliding log on a sorted set: the Lua twin of RL.SLIDINGLOG, for
-- `make bench`.
--
-- EVALSHA <sha> 1 key limit window_s [cost]
--   limit: the most allowed in any window-long span; window_s: the window in
--   seconds; cost: what this request counts (default 1).
-- State: one member per allowed unit, scored by its time (Unix ms). Members
-- are the request's server time in microseconds (plus ":i" for the i-th unit
-- of a request costing more than 1), unique since no two scripts run in the
-- same microsecond. A denial adds nothing.
-- Replies like RL.SLIDINGLOG:
--   {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3] or '1')

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local stamp = time[1] .. string.format('%06d', tonumber(time[2]))

-- The span is (now - window, now]: an entry exactly a window old is out.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = redis.call('ZCARD', KEYS[1])
if cost <= limit and used + cost <= limit then
  if cost == 1 then
    redis.call('ZADD', KEYS[1], now, stamp)
  else
    local args = {}
    for i = 1, cost do
      args[#args + 1] = now
      args[#args + 1] = stamp .. ':' .. i
    end
    redis.call('ZADD', KEYS[1], unpack(args))
  end
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, limit, limit - used - cost, 0, window}
end

local retry = -1
if cost <= limit then
  -- Until the oldest entries holding the excess have left the window.
  local excess = used + cost - limit
  local entry = redis.call('ZRANGE', KEYS[1], excess - 1, excess - 1, 'WITHSCORES')
  retry = math.max(tonumber(entry[2]) + window - now, 1)
end
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local reset = 0
if newest[2] then
  reset = tonumber(newest[2]) + window - now
end
return {0, limit, math.max(limit - used, 0), retry, reset}
