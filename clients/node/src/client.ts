/**
 * The client: one typed method per command, over any adapter (ioredis or
 * node-redis, single server or cluster).
 */
import { type RedisAdapter, type RedisLike, adapt } from "./adapter.js";
import * as commands from "./commands.js";
import type { AcquireOptions, CheckOptions, Command, KeyInfo, Tiers, TopEntry } from "./commands.js";
import type { Decision, Lease } from "./decision.js";
import { RateLimitExceeded, translate } from "./errors.js";
import { GCRA, FixedWindow, LeakyBucket, type Limit, SlidingCounter, SlidingLog, TokenBucket } from "./limits.js";
import { NamedPolicy, PolicyBook, type PolicyInfo, policyCheck, policyGet } from "./policies.js";
import type { Duration } from "./units.js";

/**
 * Rate-limit commands over an ioredis or node-redis client (single or
 * cluster). `checkAll` needs its keys in one cluster slot: give them a common
 * hash tag (`{user:42}:s`, `{user:42}:m`).
 */
export class RateLimiter {
  readonly adapter: RedisAdapter;

  constructor(redis: RedisLike) {
    this.adapter = adapt(redis);
  }

  /** Sends `command`; an error reply throws the matching error of `errors`. */
  async run<T>(command: Command<T>): Promise<T> {
    commands.checkBlock(command, this.adapter.commandTimeoutMs());
    const args = [command.name, ...command.args];
    let reply: unknown;
    try {
      reply = command.everyPrimary
        ? await this.adapter.sendToPrimaries(args)
        : await this.adapter.send(args, command.keys[0]);
    } catch (error) {
      throw translate(error, command.name);
    }
    return command.parse(reply);
  }

  /** The definitions of the named policies checked through this client, read for the headers. */
  readonly policies = new PolicyBook();

  /**
   * Checks `key` against `limit` (any algorithm), or against a named policy
   * (`RL.CHECK`; a policy of several tiers checks one key per tier,
   * `policyKeys`). A policy Redis does not hold throws `PolicyNotFoundError`.
   */
  check(key: string, limit: Limit | NamedPolicy, options?: CheckOptions): Promise<Decision> {
    if (limit instanceof NamedPolicy) {
      // What is wrong with the call throws now, as for a limit; the rest is the server's.
      const name = limit.staticName();
      policyCheck(key, name, this.policies, options);
      return this.checkPolicy(key, name, options);
    }
    return this.run(commands.check(key, limit, options));
  }

  private async checkPolicy(key: string, name: string, options?: CheckOptions): Promise<Decision> {
    if (this.policies.stale(name)) this.policies.put(name, await this.run(policyGet(name)));
    return this.run(policyCheck(key, name, this.policies, options));
  }

  /** `RL.PEEK`: what checking `key` against `limit` would answer now, changing nothing (a named policy: `RL.CHECK ... PEEK`). */
  peek(key: string, limit: Limit | NamedPolicy, options: { cost?: number } = {}): Promise<Decision> {
    if (limit instanceof NamedPolicy) return this.check(key, limit, { ...options, peek: true });
    return this.run(commands.peek(key, limit, options.cost));
  }

  /** `RL.POLICY GET`: the policy's version and definition words, or null. */
  policy(name: string): Promise<PolicyInfo | null> {
    return this.run(policyGet(name));
  }

  /** `RL.TOKENBUCKET`: bursts up to `capacity`, refilling `rate` a second. */
  tokenBucket(key: string, capacity: number, rate: number, options?: CheckOptions): Promise<Decision> {
    return this.check(key, new TokenBucket(capacity, rate), options);
  }

  /** `RL.SLIDINGCOUNTER`: about `limit` in any `window`. */
  slidingCounter(
    key: string,
    limit: number,
    window: Duration,
    options?: CheckOptions & { precision?: number },
  ): Promise<Decision> {
    const { precision, ...rest } = options ?? {};
    return this.check(key, new SlidingCounter(limit, window, precision === undefined ? {} : { precision }), rest);
  }

  /** `RL.FIXEDWINDOW`: `limit` per epoch-aligned `window`. */
  fixedWindow(key: string, limit: number, window: Duration, options?: CheckOptions): Promise<Decision> {
    return this.check(key, new FixedWindow(limit, window), options);
  }

  /** `RL.SLIDINGLOG`: exactly at most `limit` in any `window`. */
  slidingLog(key: string, limit: number, window: Duration, options?: CheckOptions): Promise<Decision> {
    return this.check(key, new SlidingLog(limit, window), options);
  }

  /** `RL.LEAKYBUCKET`: a queue of `capacity` leaving at `rate` a second; wait `delayMs` before acting. */
  leakyBucket(key: string, capacity: number, rate: number, options?: CheckOptions): Promise<Decision> {
    return this.check(key, new LeakyBucket(capacity, rate), options);
  }

  /** `RL.GCRA`: `count` per `period`, bursts of `burst` beyond. */
  gcra(key: string, burst: number, count: number, period: Duration, options?: CheckOptions): Promise<Decision> {
    return this.check(key, new GCRA(burst, count, period), options);
  }

  /** `CL.THROTTLE` (redis-cell's command; `period` in whole seconds). */
  clThrottle(key: string, maxBurst: number, count: number, periodS: number, quantity = 1): Promise<Decision> {
    return this.run(commands.clThrottle(key, maxBurst, count, periodS, quantity));
  }

  /** `RL.ALL`: every tier at once, taken from all or none; `decision.tiers` holds each tier's answer. */
  checkAll(tiers: Tiers, options?: CheckOptions): Promise<Decision> {
    return this.run(commands.checkAll(tiers, options));
  }

  /** `RL.ACQUIRE`: one of `limit` slots for at most `lease`; give `lease.id` to `release`. */
  acquire(key: string, limit: number, lease: Duration, options?: AcquireOptions): Promise<Lease> {
    return this.run(commands.acquire(key, limit, lease, options));
  }

  /** `RL.RELEASE`: true if `id` held a live lease. */
  release(key: string, id: string): Promise<boolean> {
    return this.run(commands.release(key, id));
  }

  /**
   * Runs `fn` holding a slot, and releases it when `fn` ends, however it
   * ends (a crash gives it back when the lease ends). Throws
   * `RateLimitExceeded` when no slot is free (after waiting up to `block`),
   * so `fn` never runs without one.
   */
  async hold<T>(
    key: string,
    limit: number,
    lease: Duration,
    fn: (lease: Lease) => T | Promise<T>,
    options?: AcquireOptions,
  ): Promise<T> {
    const taken = await this.acquire(key, limit, lease, options);
    if (!taken.allowed || taken.id === null) throw new RateLimitExceeded(taken);
    try {
      return await fn(taken);
    } finally {
      await this.release(key, taken.id);
    }
  }

  /** `RL.INFO`: what `key` holds, or null when it does not exist. */
  info(key: string): Promise<KeyInfo | null> {
    return this.run(commands.info(key));
  }

  /** `RL.TOP`: the `count` keys denied most, most first; a cluster's primaries merged. */
  top(count = 10, options: { withError?: boolean } = {}): Promise<TopEntry[]> {
    return this.run(commands.top(count, options.withError ?? false));
  }

  /** `RL.TOP RESET`: forget every count (on every primary). */
  topReset(): Promise<void> {
    return this.run(commands.topReset());
  }
}
