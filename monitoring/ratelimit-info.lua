-- INFO ratelimit for prometheus-redis-exporter (its -script option, or
-- REDIS_EXPORTER_SCRIPT): each ratelimit_<field>:<n> line of the module's
-- INFO section becomes the pair <field>, <n>, which the exporter publishes
-- as redis_script_values{key="<field>"} <n>. Read-only: it runs INFO and
-- nothing else, so the exporter's user needs +eval and +info (see
-- docs/operations.md, "Prometheus").
local section = redis.call('INFO', 'ratelimit')
local pairs = {}
for field, value in string.gmatch(section, 'ratelimit_([%w_]+):(%d+)') do
  pairs[#pairs + 1] = field
  pairs[#pairs + 1] = value
end
return pairs
