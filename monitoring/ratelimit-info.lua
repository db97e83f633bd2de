-- INFO ratelimit for prometheus-redis-exporter (its -script option, or
-- REDIS_EXPORTER_SCRIPT): each ratelimit_<field>:<n> line of the module's
-- INFO section becomes the pair <field>, <n>, which the exporter publishes
-- as redis_script_values{key="<field>"} <n>; each policy's line
-- ratelimit_policy_<name>:checks=..,allowed=..,denied=..,shadow_denied=..,keys=..
-- becomes policy_<name>_checks, _allowed, _denied, _shadow_denied and _keys (the
-- digest, not a number, is left out: compare it across nodes with
-- RL.POLICY DIGEST). Read-only: it runs INFO and
-- nothing else, so the exporter's user needs +eval and +info (see
-- docs/operations.md, "Prometheus").
local section = redis.call('INFO', 'ratelimit')
local pairs = {}
for field, value in string.gmatch(section, 'ratelimit_([%w_]+):(%d+)\r\n') do
  pairs[#pairs + 1] = field
  pairs[#pairs + 1] = value
end
local counts = 'ratelimit_(policy_[%w_%.%-]+):checks=(%d+),allowed=(%d+),denied=(%d+),shadow_denied=(%d+),keys=(%d+)'
for policy, checks, allowed, denied, shadow, keys in string.gmatch(section, counts) do
  for _, pair in ipairs({{'checks', checks}, {'allowed', allowed}, {'denied', denied}, {'shadow_denied', shadow}, {'keys', keys}}) do
    pairs[#pairs + 1] = policy .. '_' .. pair[1]
    pairs[#pairs + 1] = pair[2]
  end
end
return pairs
