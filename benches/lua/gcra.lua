-- GCRA (the leaky bucket as a meter) on a string: the Lua twin of RL.GCRA
-- and CL.THROTTLE (and of RL.LEAKYBUCKET's decisions), for `make bench`.
--
-- EVALSHA <sha> 1 key burst count period_s [cost]
--   count requests per period_s seconds in the long run, bursts of burst
--   beyond that: the limit is burst + 1 (redis-cell's meaning); cost: what
--   this request counts (default 1).
-- Terms: T, the emission interval, is period / count; the state is the
-- theoretical arrival time (TAT, Unix ms, fractional): when the meter would
-- be empty. A request is allowed when the TAT after it is at most
-- T * limit ahead of now.
-- Replies like RL.GCRA:
--   {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
local burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3]) * 1000
local cost = tonumber(ARGV[4] or '1')
local limit = burst + 1
local interval = period / count
local span = interval * limit

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000

local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + interval * cost
if cost <= limit and new_tat - now <= span then
  local reset = math.ceil(new_tat - now)
  redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', math.max(reset, 1))
  return {1, limit, math.floor((span - (new_tat - now)) / interval), 0, reset}
end
local retry = -1
if cost <= limit then
  retry = math.max(math.ceil(new_tat - span - now), 1)
end
return {0, limit, math.floor((span - (tat - now)) / interval), retry, math.ceil(tat - now)}
