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
import { type RedisAdapter, type RedisLike, adapt } from "./adapter.js";
import * as commands from "./commands.js";
import { translate } from "./errors.js";
import { FixedWindow, type Limit, SlidingCounter, SlidingLog } from "./limits.js";

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
}

export interface RedisRatelimitStoreOptions {
  redis: RedisLike;
  /** The start of the keys (default `"rl:erl:"`). */
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
}

export class RedisRatelimitStore {
  readonly prefix: string;
  /** Counts live in Redis, shared by every process. */
  readonly localKeys = false;
  private readonly adapter: RedisAdapter;
  private readonly algorithm: NonNullable<RedisRatelimitStoreOptions["algorithm"]>;
  private readonly fixedLimit: number | undefined;
  private rule: Limit | undefined;

  constructor(options: RedisRatelimitStoreOptions) {
    this.adapter = adapt(options.redis);
    this.prefix = options.prefix ?? "rl:erl:";
    this.algorithm = options.algorithm ?? "fixed-window";
    if (!["fixed-window", "sliding-counter", "sliding-log"].includes(this.algorithm)) {
      throw new TypeError(`algorithm must be "fixed-window", "sliding-counter" or "sliding-log", not ${this.algorithm}`);
    }
    this.fixedLimit = options.limit;
  }

  /** Called by express-rate-limit with its options: builds the limit (and throws on what it cannot honour). */
  init(options: StoreInitOptions): void {
    const configured = options.limit ?? options.max;
    const limit = typeof configured === "number" ? configured : this.fixedLimit;
    if (limit === undefined) {
      throw new TypeError(
        "express-rate-limit's limit is a function: give the store its number too (new RedisRatelimitStore({ redis, limit }))",
      );
    }
    if (options.skipFailedRequests === true || options.skipSuccessfulRequests === true) {
      throw new TypeError(
        "skipFailedRequests / skipSuccessfulRequests need a store that gives hits back (decrement); " +
          "the module never takes a hit back: use the default store for those, or count every request",
      );
    }
    const Algorithm = { "fixed-window": FixedWindow, "sliding-counter": SlidingCounter, "sliding-log": SlidingLog }[
      this.algorithm
    ];
    this.rule = new Algorithm(limit, options.windowMs, { name: "express-rate-limit" });
  }

  private limit(): Limit {
    if (this.rule === undefined) throw new Error("the store is used before express-rate-limit called init()");
    return this.rule;
  }

  private async run<T>(command: commands.Command<T>): Promise<T> {
    try {
      return command.parse(await this.adapter.send([command.name, ...command.args], command.keys[0]));
    } catch (error) {
      throw translate(error, command.name);
    }
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    const limit = this.limit();
    const d = await this.run(commands.check(this.prefix + key, limit));
    return {
      totalHits: d.allowed ? d.limit - d.remaining : d.limit + 1,
      resetTime: new Date(Date.now() + (d.allowed ? d.resetAfterMs : (d.retryAfterMs ?? d.resetAfterMs))),
    };
  }

  /** The module never gives a hit back: refused in `init` for the options that need it; a no-op otherwise. */
  async decrement(_key: string): Promise<void> {}

  async resetKey(key: string): Promise<void> {
    await this.adapter.send(["DEL", this.prefix + key], this.prefix + key);
  }

  /** The count now (`RL.PEEK`, which changes nothing); undefined for a client never seen. */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const d = await this.run(commands.peek(this.prefix + key, this.limit()));
    const hits = d.limit - d.remaining;
    if (hits === 0 && d.resetAfterMs === 0) return undefined;
    return { totalHits: hits, resetTime: new Date(Date.now() + d.resetAfterMs) };
  }
}
