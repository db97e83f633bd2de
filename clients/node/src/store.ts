/**
 * A store for express-rate-limit 7 and 8: an app that uses express-rate-limit
 * changes one line, `store: new RedisRatelimitStore({ redis })`, and its
 * counts move to the module (one command per request, no Lua).
 *
 * express-rate-limit counts hits and denies once `totalHits` passes its
 * `limit`; the module decides itself and takes nothing on a denial. So a
 * denied request reports `totalHits = limit + 1`, and an allowed one
 * `limit - remaining`: express-rate-limit then denies exactly what the
 * module denies, and its headers say what the module says.
 */
import { type RedisAdapter, type RedisLike } from "./adapter.js";
import * as commands from "./commands.js";
import type { Decision } from "./decision.js";
import { RedisConfigurationError } from "./errors.js";
import { Alarm, Guard, type Logger } from "./guard.js";
import { FixedWindow, type Limit, SlidingCounter, SlidingLog } from "./limits.js";
import { claimKeys } from "./claims.js";
import { NamedPolicy, PolicyBook, checkPolicyName, policyCheck, policyGet } from "./policies.js";

/** express-rate-limit's `ClientRateLimitInfo`. */
export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** What the store reads of express-rate-limit's options in `init`. */
export interface StoreInitOptions {
  windowMs: number;
  limit?: unknown;
  max?: unknown;
  skipFailedRequests?: boolean;
  skipSuccessfulRequests?: boolean;
  passOnStoreError?: boolean;
}

export interface RedisRatelimitStoreOptions {
  redis: RedisLike;
  /**
   * The start of the keys (default `"rl:erl:"`). Each store on one Redis
   * server needs its own: a second store with a prefix already in use is
   * refused when it is built.
   */
  prefix?: string;
  /**
   * The algorithm: `"fixed-window"` (default, what express-rate-limit's own
   * stores do), `"sliding-counter"` or `"sliding-log"` (exact).
   */
  algorithm?: "fixed-window" | "sliding-counter" | "sliding-log";
  /**
   * The limit, when express-rate-limit's `limit` is a function (it is then
   * only known per request, and the module needs it in the command).
   */
  limit?: number;
  /**
   * A named policy held in Redis (`"plan:free"`, or a `NamedPolicy` of a
   * fixed name) instead of `algorithm` and express-rate-limit's `windowMs`:
   * the policy decides (`RL.CHECK`). express-rate-limit still compares the
   * hits with its own `limit`, so an allowed request reports at most that
   * many and a denied one one more: give express-rate-limit the policy's
   * limit, which its headers show.
   */
  policy?: string | NamedPolicy;
  /** The most a request waits for Redis (ms, default 200), whatever the client's own timeouts. */
  timeoutMs?: number;
  /** After an outage, how long requests skip Redis before one probes it (ms, default 2000). */
  cooldownMs?: number;
  /** Where configuration errors go (default `console`). */
  logger?: Logger;
}

const STORE_OPTIONS = new Set(["redis", "prefix", "algorithm", "limit", "policy", "timeoutMs", "cooldownMs", "logger"]);

/**
 * express-rate-limit calls `init` inside `rateLimit()` and only logs what it
 * throws, then answers every request 500 (or, with `passOnStoreError`, lets
 * every request through unlimited). So an option the store cannot honour is
 * thrown again outside it, on the next tick: the app stops at start-up with
 * the message, rather than starting unlimited.
 */
function refuse(error: Error): never {
  process.nextTick(() => {
    throw error;
  });
  throw error;
}

export class RedisRatelimitStore {
  readonly prefix: string;
  /** Counts live in Redis, shared by every process. */
  readonly localKeys = false;
  private readonly guard: Guard;
  private readonly adapter: RedisAdapter;
  private readonly algorithm: NonNullable<RedisRatelimitStoreOptions["algorithm"]>;
  private readonly fixedLimit: number | undefined;
  private readonly alarm: Alarm;
  private rule: Limit | "deny-all" | undefined;
  /** The named policy's name, when the store checks one. */
  private readonly policyName: string | undefined;
  private readonly policies = new PolicyBook();
  /** express-rate-limit's own limit, which a policy's hits are reported against. */
  private erlLimit = 0;
  private initError: Error | undefined;
  private passOnStoreError = false;
  /**
   * Settles once the start-up check that `init` starts has answered: with
   * the configuration error it found (a wrong password, a server without
   * the module; logged once, loudly), or undefined. Never rejects.
   */
  started: Promise<Error | undefined> = Promise.resolve(undefined);

  constructor(options: RedisRatelimitStoreOptions) {
    if (options === null || typeof options !== "object") throw new TypeError("give the store's options ({ redis })");
    for (const name of Object.keys(options)) {
      if (!STORE_OPTIONS.has(name)) {
        throw new TypeError(`unknown option ${JSON.stringify(name)}; the options are ${[...STORE_OPTIONS].join(", ")}`);
      }
    }
    this.guard = new Guard(options.redis, { timeoutMs: options.timeoutMs, cooldownMs: options.cooldownMs });
    this.adapter = this.guard.adapter;
    this.prefix = options.prefix ?? "rl:erl:";
    if (typeof this.prefix !== "string" || this.prefix === "") throw new TypeError("prefix must be a non-empty string");
    this.algorithm = options.algorithm ?? "fixed-window";
    if (!["fixed-window", "sliding-counter", "sliding-log"].includes(this.algorithm)) {
      throw new TypeError(`algorithm must be "fixed-window", "sliding-counter" or "sliding-log", not ${this.algorithm}`);
    }
    if (options.limit !== undefined && (!Number.isSafeInteger(options.limit) || options.limit < 0)) {
      throw new RangeError(`limit must be a whole number from 0 to ${Number.MAX_SAFE_INTEGER}, not ${String(options.limit)}`);
    }
    this.fixedLimit = options.limit;
    this.policyName =
      options.policy === undefined ? undefined : options.policy instanceof NamedPolicy ? options.policy.staticName() : checkPolicyName(options.policy);
    this.alarm = new Alarm(options.logger ?? console, `express-rate-limit store ${this.prefix}`);
  }

  /**
   * Called by express-rate-limit with its options: builds the limit. What
   * it cannot honour stops the app at start-up (see `refuse`); a limit of 0
   * (express-rate-limit 7 and later: block every request) is honoured
   * without asking Redis.
   */
  init(options: StoreInitOptions): void {
    this.passOnStoreError = options.passOnStoreError === true;
    try {
      this.rule = this.build(options);
      // Two limiters sharing a prefix share their counts (and, of two
      // algorithms, answer WRONGTYPE): refused, as the app is built.
      claimKeys(
        this.adapter,
        [`${this.prefix}*`],
        this.rule === "deny-all"
          ? "deny-all"
          : this.policyName !== undefined
            ? `policy ${this.policyName}`
            : `${this.rule.word} ${this.rule.spec.params.join(" ")}`,
        "RedisRatelimitStore",
        "Give each express-rate-limit limiter a store with its own prefix " +
          '(new RedisRatelimitStore({ redis, prefix: "rl:erl:login:" })).',
      );
    } catch (error) {
      this.initError = new TypeError(
        `redis-ratelimit's RedisRatelimitStore cannot honour these express-rate-limit options: ${(error as Error).message}`,
      );
      refuse(this.initError);
    }
    const rule = this.rule;
    if (rule === "deny-all") return;
    const check =
      this.policyName === undefined ? commands.peek(`${this.prefix}validate`, rule) : policyCheck(`${this.prefix}validate`, this.policyName, new PolicyBook(), { peek: true });
    this.started = this.guard.startupError([check]).then((error) => {
      if (error !== undefined) this.raise(error);
      return error;
    });
  }

  private build(options: StoreInitOptions): Limit | "deny-all" {
    const configured = options.limit ?? options.max;
    if (typeof configured === "function" && this.fixedLimit === undefined) {
      throw new TypeError(
        "express-rate-limit's limit is a function: give the store its number too (new RedisRatelimitStore({ redis, limit }))",
      );
    }
    const limit = typeof configured === "function" ? this.fixedLimit : (configured ?? 5);
    if (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 0) {
      throw new RangeError(`limit must be a whole number from 0 to ${Number.MAX_SAFE_INTEGER}, not ${JSON.stringify(limit)}`);
    }
    if (options.skipFailedRequests === true || options.skipSuccessfulRequests === true) {
      throw new TypeError(
        "skipFailedRequests / skipSuccessfulRequests need a store that gives hits back (decrement); " +
          "the module never takes a hit back: use the default store for those, or count every request",
      );
    }
    const windowMs = options.windowMs;
    if (typeof windowMs !== "number" || !Number.isSafeInteger(windowMs) || windowMs < 1) {
      throw new RangeError(`windowMs must be a whole number of milliseconds from 1, not ${String(windowMs)}`);
    }
    if (limit === 0) return "deny-all";
    this.erlLimit = limit;
    const Algorithm = { "fixed-window": FixedWindow, "sliding-counter": SlidingCounter, "sliding-log": SlidingLog }[
      this.algorithm
    ];
    return new Algorithm(limit, `${windowMs}ms`, { name: "express-rate-limit" });
  }

  private raise(error: Error): void {
    this.alarm.raise(
      error,
      error instanceof RedisConfigurationError
        ? this.passOnStoreError
          ? "Every request is denied (429) until it is fixed: never let through unlimited, passOnStoreError or not."
          : "Every request gets an error (500) until it is fixed."
        : "Every request gets the store's error: express-rate-limit answers 500, or with passOnStoreError lets it through.",
    );
  }

  private limit(): Limit | "deny-all" {
    if (this.initError !== undefined) throw this.initError;
    if (this.rule === undefined) throw new Error("the store is used before express-rate-limit called init()");
    return this.rule;
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    const limit = this.limit();
    if (limit === "deny-all") return { totalHits: 1, resetTime: undefined };
    let d;
    try {
      d = await this.guard.send(await this.command(this.prefix + key, limit, false));
    } catch (error) {
      if (this.policyName !== undefined) this.policies.forget();
      if (error instanceof RedisConfigurationError) {
        this.raise(error);
        // express-rate-limit would let the request through: denied instead.
        if (this.passOnStoreError) return { totalHits: Number.MAX_SAFE_INTEGER, resetTime: undefined };
      }
      throw error;
    }
    if (this.policyName !== undefined) {
      // express-rate-limit denies past its own limit: the policy's answer in those terms.
      return {
        totalHits: d.allowed ? Math.min(this.erlLimit, d.limit - d.remaining) : this.erlLimit + 1,
        resetTime: new Date(Date.now() + (d.allowed ? d.resetAfterMs : (d.retryAfterMs ?? d.resetAfterMs))),
      };
    }
    return {
      totalHits: d.allowed ? d.limit - d.remaining : d.limit + 1,
      resetTime: new Date(Date.now() + (d.allowed ? d.resetAfterMs : (d.retryAfterMs ?? d.resetAfterMs))),
    };
  }

  /** The check (or peek) of `key`: the limit's, or the named policy's (its definition read when stale). */
  private async command(key: string, limit: Limit, peek: boolean): Promise<commands.Command<Decision>> {
    const name = this.policyName;
    if (name === undefined) return peek ? commands.peek(key, limit) : commands.check(key, limit);
    if (this.policies.stale(name)) this.policies.put(name, await this.guard.send(policyGet(name)));
    return policyCheck(key, name, this.policies, peek ? { peek: true } : {});
  }

  /** The module never gives a hit back: refused in `init` for the options that need it; a no-op otherwise. */
  async decrement(_key: string): Promise<void> {}

  /** Forgets `key` (express-rate-limit's key, e.g. the address): its count starts over. */
  async resetKey(key: string): Promise<void> {
    await this.adapter.send(["DEL", this.prefix + key], this.prefix + key);
  }

  /** The count now (`RL.PEEK`, which changes nothing); undefined for a client never seen. */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const limit = this.limit();
    if (limit === "deny-all") return undefined;
    const d = await this.guard.send(await this.command(this.prefix + key, limit, true));
    const hits = d.limit - d.remaining;
    if (hits === 0 && d.resetAfterMs === 0) return undefined;
    return { totalHits: hits, resetTime: new Date(Date.now() + d.resetAfterMs) };
  }
}
