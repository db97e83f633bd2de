-- Token bucket on a hash: the Lua twin of RL.TOKENBUCKET, for `make bench`.
--
-- EVALSHA <sha> 1 key capacity rate [cost]
--   capacity: the most tokens the bucket holds; rate: tokens added a second;
--   cost: tokens this request takes (default 1).
-- State: the hash {tokens, ts}: the tokens at time ts (Unix ms, server time).
-- Replies like RL.TOKENBUCKET:
--   {allowed, capacity, remaining, retry_after_ms, reset_after_ms}.
-- A denial writes nothing; an allowed request sets the key to expire when the
-- bucket is full again.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
if now > ts then
  tokens = math.min(capacity, tokens + (now - ts) * rate / 1000)
  ts = now
end

local function ms_to_gain(amount)
  return math.ceil(amount * 1000 / rate)
end

if cost <= capacity and tokens >= cost then
  tokens = tokens - cost
  local reset = ms_to_gain(capacity - tokens)
  redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', ts)
  redis.call('PEXPIRE', KEYS[1], math.max(reset, 1))
  return {1, capacity, math.floor(tokens), 0, reset}
end
local retry = -1
if cost <= capacity then
  retry = math.max(ms_to_gain(cost - tokens), 1)
end
return {0, capacity, math.floor(tokens), retry, ms_to_gain(capacity - tokens)}
