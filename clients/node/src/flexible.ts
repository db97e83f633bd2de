/**
 * A `RateLimiterRedis`-like facade for code written against
 * rate-limiter-flexible: `consume(key, points)` resolves with a result, and
 * rejects with one (`msBeforeNext`, `remainingPoints`, `consumedPoints`)
 * when the limit is reached, so `catch (res) { res.msBeforeNext }` keeps
 * working. Redis errors reject with an `Error`, as rate-limiter-flexible's
 * do without an insurance limiter.
 */
import { claimKeys } from "./claims.js";
import * as commands from "./commands.js";
import { RedisConfigurationError } from "./errors.js";
import { Alarm, Guard, type Logger } from "./guard.js";
import { FixedWindow } from "./limits.js";
import { integer } from "./units.js";

export interface RateLimiterRedisOptions {
  /** The Redis client (rate-limiter-flexible's name for it). */
  storeClient: object;
  /** Points per `duration` (default 4, as rate-limiter-flexible). */
  points?: number;
  /** The window in seconds (default 1). Windows are aligned to the Unix epoch. */
  duration?: number;
  /** Default `"rlflx"`. Each limiter on one Redis server needs its own. */
  keyPrefix?: string;
  /** Seconds a key stays blocked once it passes its points (the module's PENALTY); 0: none. */
  blockDuration?: number;
  /** The most a call waits for Redis (ms, default 200), whatever the client's own timeouts. */
  timeoutMs?: number;
  /** After an outage, how long calls skip Redis before one probes it (ms, default 2000). */
  cooldownMs?: number;
  /** Where configuration errors go (default `console`). */
  logger?: Logger;
}

const OPTIONS = new Set(["storeClient", "points", "duration", "keyPrefix", "blockDuration", "timeoutMs", "cooldownMs", "logger"]);

/** rate-limiter-flexible's `RateLimiterRes`. */
export class RateLimiterRes {
  constructor(
    readonly remainingPoints: number,
    readonly msBeforeNext: number,
    readonly consumedPoints: number,
    readonly isFirstInDuration: boolean,
  ) {}

  /** The headers rate-limiter-flexible's README suggests (`Retry-After` at least 1 s). */
  get headers(): Record<string, string> {
    return {
      "Retry-After": String(Math.max(1, Math.ceil(this.msBeforeNext / 1000))),
      "X-RateLimit-Remaining": String(this.remainingPoints),
      "X-RateLimit-Reset": new Date(Date.now() + this.msBeforeNext).toISOString(),
    };
  }
}

/**
 * `consume()` and friends over the module's fixed window. Every call waits
 * for Redis at most `timeoutMs`, through the client's circuit breaker (the
 * middleware's), and an outage rejects with an `Error` (`RedisTimeoutError`,
 * `CircuitOpenError`, the client's own): what rate-limiter-flexible's
 * callers tell from a `RateLimiterRes`. A configuration error (a wrong
 * password, a client never connected) rejects with a
 * `RedisConfigurationError`, and is logged once, loudly.
 */
export class RateLimiterRedis {
  readonly points: number;
  readonly duration: number;
  readonly keyPrefix: string;
  private readonly guard: Guard;
  private readonly limit: FixedWindow;
  private readonly blockDuration: number;
  private readonly alarm: Alarm;
  /**
   * Settles when the start-up check (one `RL.PEEK`, sent when the limiter
   * is built) has answered: with the configuration error it found (a wrong
   * password, a server without the module; logged once, loudly), or
   * undefined. Never rejects.
   */
  readonly started: Promise<Error | undefined>;

  constructor(options: RateLimiterRedisOptions) {
    if (options === null || typeof options !== "object") throw new TypeError("give the limiter's options ({ storeClient, points, duration })");
    for (const name of Object.keys(options)) {
      if (!OPTIONS.has(name)) throw new TypeError(`unknown option ${JSON.stringify(name)}; the options are ${[...OPTIONS].join(", ")}`);
    }
    this.guard = new Guard(options.storeClient, { timeoutMs: options.timeoutMs, cooldownMs: options.cooldownMs });
    this.points = integer(options.points ?? 4, "points");
    this.duration = options.duration ?? 1;
    if (typeof this.duration !== "number" || !Number.isFinite(this.duration) || this.duration <= 0) {
      throw new RangeError(
        `duration must be a number of seconds above 0, not ${String(this.duration)} (rate-limiter-flexible's 0, "never reset", has no equivalent here)`,
      );
    }
    this.keyPrefix = options.keyPrefix ?? "rlflx";
    this.blockDuration = options.blockDuration ?? 0;
    if (typeof this.blockDuration !== "number" || !Number.isFinite(this.blockDuration) || this.blockDuration < 0) {
      throw new RangeError(`blockDuration must be a number of seconds, 0 or more, not ${String(this.blockDuration)}`);
    }
    this.limit = new FixedWindow(this.points, `${this.duration}s`, { name: "consume" });
    this.alarm = new Alarm(options.logger ?? console, `RateLimiterRedis ${this.keyPrefix}`);
    claimKeys(
      this.guard.adapter,
      [`${this.keyPrefix}:*`],
      JSON.stringify([this.points, this.duration, this.blockDuration]),
      "RateLimiterRedis",
      "Give each limiter its own keyPrefix.",
    );
    this.started = this.guard.startupError([commands.peek(this.key("validate"), this.limit)]).then((error) => {
      if (error !== undefined) this.raise(error);
      return error;
    });
  }

  private raise(error: Error): void {
    this.alarm.raise(error, "Every consume() rejects with this error until it is fixed.");
  }

  private key(key: string | number): string {
    return `${this.keyPrefix}:${key}`;
  }

  private async run<T>(command: commands.Command<T>): Promise<T> {
    try {
      return await this.guard.send(command);
    } catch (error) {
      if (error instanceof RedisConfigurationError) this.raise(error);
      throw error;
    }
  }

  /**
   * Takes `points`: resolves with the result, rejects with it when the
   * limit is reached. More points than the limiter has can never be taken:
   * that rejects with a `RangeError`, not a result to retry after.
   */
  async consume(key: string | number, points = 1): Promise<RateLimiterRes> {
    integer(points, "points");
    if (points > this.points) {
      throw new RangeError(`consume(${JSON.stringify(key)}, ${points}): more points than the limiter's ${this.points}; it can never pass`);
    }
    const options: commands.CheckOptions = { cost: points };
    if (this.blockDuration > 0) options.penalty = `${this.blockDuration}s`;
    const d = await this.run(commands.check(this.key(key), this.limit, options));
    const consumed = d.limit - d.remaining;
    if (d.allowed) return new RateLimiterRes(d.remaining, d.resetAfterMs, consumed, consumed === points);
    if (d.retryAfterMs === null) throw new RangeError(`consume(${JSON.stringify(key)}, ${points}): the server says it can never pass`);
    // Rejected with the result, not an Error: what rate-limiter-flexible's callers catch.
    // eslint-disable-next-line @typescript-eslint/only-throw-error
    throw new RateLimiterRes(0, Math.max(1, d.retryAfterMs), consumed + points, false);
  }

  /** The state now, changing nothing; null for a key never seen. */
  async get(key: string | number): Promise<RateLimiterRes | null> {
    const d = await this.run(commands.peek(this.key(key), this.limit));
    const consumed = d.limit - d.remaining;
    if (consumed === 0 && d.resetAfterMs === 0) return null;
    return new RateLimiterRes(d.remaining, d.resetAfterMs, consumed, false);
  }

  /** Forgets `key` (its points and any block): true if it existed. */
  async delete(key: string | number): Promise<boolean> {
    return Number(await this.guard.adapter.send(["DEL", this.key(key)], this.key(key))) === 1;
  }
}
