/**
 * A `RateLimiterRedis`-like facade for code written against
 * rate-limiter-flexible: `consume(key, points)` resolves with a result, and
 * rejects with one (`msBeforeNext`, `remainingPoints`, `consumedPoints`)
 * when the limit is reached, so `catch (res) { res.msBeforeNext }` keeps
 * working. Redis errors reject with an `Error`, as rate-limiter-flexible's
 * do without an insurance limiter.
 */
import { type RedisAdapter, type RedisLike, adapt } from "./adapter.js";
import * as commands from "./commands.js";
import { translate } from "./errors.js";
import { FixedWindow } from "./limits.js";

export interface RateLimiterRedisOptions {
  /** The Redis client (rate-limiter-flexible's name for it). */
  storeClient: RedisLike;
  /** Points per `duration` (default 4, as rate-limiter-flexible). */
  points?: number;
  /** The window in seconds (default 1). Windows are aligned to the Unix epoch. */
  duration?: number;
  /** Default `"rlflx"`. */
  keyPrefix?: string;
  /** Seconds a key stays blocked once it passes its points (the module's PENALTY); 0: none. */
  blockDuration?: number;
}

/** rate-limiter-flexible's `RateLimiterRes`. */
export class RateLimiterRes {
  constructor(
    readonly remainingPoints: number,
    readonly msBeforeNext: number,
    readonly consumedPoints: number,
    readonly isFirstInDuration: boolean,
  ) {}

  /** The headers rate-limiter-flexible's README suggests. */
  get headers(): Record<string, string> {
    return {
      "Retry-After": String(Math.ceil(this.msBeforeNext / 1000)),
      "X-RateLimit-Remaining": String(this.remainingPoints),
      "X-RateLimit-Reset": new Date(Date.now() + this.msBeforeNext).toISOString(),
    };
  }
}

export class RateLimiterRedis {
  readonly points: number;
  readonly duration: number;
  readonly keyPrefix: string;
  private readonly adapter: RedisAdapter;
  private readonly limit: FixedWindow;
  private readonly blockDuration: number;

  constructor(options: RateLimiterRedisOptions) {
    this.adapter = adapt(options.storeClient);
    this.points = options.points ?? 4;
    this.duration = options.duration ?? 1;
    this.keyPrefix = options.keyPrefix ?? "rlflx";
    this.blockDuration = options.blockDuration ?? 0;
    this.limit = new FixedWindow(this.points, this.duration * 1000, { name: "consume" });
  }

  private key(key: string | number): string {
    return `${this.keyPrefix}:${key}`;
  }

  private async run<T>(command: commands.Command<T>): Promise<T> {
    try {
      return command.parse(await this.adapter.send([command.name, ...command.args], command.keys[0]));
    } catch (error) {
      throw translate(error, command.name);
    }
  }

  /** Takes `points`: resolves with the result, rejects with it when the limit is reached. */
  async consume(key: string | number, points = 1): Promise<RateLimiterRes> {
    const options: commands.CheckOptions = { cost: points };
    if (this.blockDuration > 0) options.penalty = this.blockDuration * 1000;
    const d = await this.run(commands.check(this.key(key), this.limit, options));
    const consumed = d.limit - d.remaining;
    if (d.allowed) return new RateLimiterRes(d.remaining, d.resetAfterMs, consumed, consumed === points);
    // Rejected with the result, not an Error: what rate-limiter-flexible's callers catch.
    // eslint-disable-next-line @typescript-eslint/only-throw-error
    throw new RateLimiterRes(0, d.retryAfterMs ?? d.resetAfterMs, consumed + points, false);
  }

  /** The state now, changing nothing; null for a key never seen. */
  async get(key: string | number): Promise<RateLimiterRes | null> {
    const d = await this.run(commands.peek(this.key(key), this.limit));
    const consumed = d.limit - d.remaining;
    if (consumed === 0 && d.resetAfterMs === 0) return null;
    return new RateLimiterRes(d.remaining, d.resetAfterMs, consumed, false);
  }

  /** Forgets `key`: true if it existed. */
  async delete(key: string | number): Promise<boolean> {
    return Number(await this.adapter.send(["DEL", this.key(key)], this.key(key))) === 1;
  }
}
