/**
 * A client for the redis-ratelimit module: typed calls for every command, a
 * `Decision` that writes its own HTTP headers, and middleware for Express,
 * Fastify, express-rate-limit and rate-limiter-flexible users.
 */
export { type PrimaryNode, type RedisAdapter, type RedisLike, adapt, keySlot } from "./adapter.js";
export { RateLimiter } from "./client.js";
export {
  type AcquireOptions,
  type CheckOptions,
  type Grant,
  type Command,
  type InfoValue,
  type KeyInfo,
  type Tiers,
  type TopEntry,
  mergeTop,
} from "./commands.js";
export * as commands from "./commands.js";
export { Decision, type DecisionFields, type HeaderOptions, type Headers, Lease, Policy, SF_INTEGER_MAX } from "./decision.js";
export {
  CircuitOpenError,
  InvalidArgumentError,
  ModuleNotLoadedError,
  PolicyNotFoundError,
  RateLimitError,
  RateLimitExceeded,
  RedisConfigurationError,
  RedisTimeoutError,
  WaitInterruptedError,
  WrongTypeError,
  isConfigurationError,
  isUnreachable,
} from "./errors.js";
export { CircuitBreaker, Guard, type GuardOptions, type Logger } from "./guard.js";
export { type ExpressMiddleware, rateLimit } from "./express.js";
export { GlobalLimit, type GlobalLimitOptions, type GlobalLimitStats } from "./global.js";
export { fastifyRateLimit } from "./fastify.js";
export { RateLimiterRedis, type RateLimiterRedisOptions, RateLimiterRes } from "./flexible.js";
export {
  GCRA,
  type Arg,
  FixedWindow,
  LeakyBucket,
  Limit,
  type LimitOptions,
  SlidingCounter,
  type SlidingCounterOptions,
  SlidingLog,
  TokenBucket,
} from "./limits.js";
export {
  type KeyFn,
  type LimitFor,
  type RequestInfo,
  Rule,
  type RuleOptions,
  type Verdict,
  apiKey,
  clientIp,
  forgetRules,
  forwardedIp,
  ipKey,
  type Ipv6Subnet,
  normaliseIp,
} from "./rule.js";
export {
  NamedPolicy,
  POLICY_MAX_AGE_MS,
  type PolicyChange,
  type PolicyDefinition,
  type PolicyInfo,
  PolicySyncError,
  type SyncReport,
  loadPolicies,
  parseDefinition,
  policyKeys,
  policyWords,
  syncPolicies,
} from "./policies.js";
export { type ClientRateLimitInfo, RedisRatelimitStore, type RedisRatelimitStoreOptions } from "./store.js";
export { type Duration } from "./units.js";
