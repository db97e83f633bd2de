/**
 * The limits: one class per algorithm, holding its parameters, checked when
 * built. A limit is what a check needs (its command and parameters), what a
 * tier of `RL.ALL` needs, and what the IETF `RateLimit-Policy` field states.
 */
import { Policy } from "./decision.js";
import { type Duration, decimalArg, durationArg, integer, rate, spanMs } from "./units.js";

/** One argument of a command. */
export type Arg = string | number;

export interface LimitOptions {
  /**
   * Names the policy in the IETF fields and, in the middleware, the limit's
   * Redis key. Default: the algorithm's name in lower case (`"tokenbucket"`).
   */
  name?: string;
}

export abstract class Limit {
  /** The algorithm as `RL.ALL` and `RL.PEEK` spell it. */
  abstract readonly word: string;
  readonly name: string | undefined;

  protected constructor(options: LimitOptions | undefined) {
    this.name = options?.name;
  }

  /** `RL.<word>`. */
  get command(): string {
    return `RL.${this.word}`;
  }

  /** The parameters after the key, in the command's order. */
  abstract params(): Arg[];

  /** The most the key allows at once: the reply's `limit`. */
  abstract get quota(): number;

  /** The span the quota is for (ms): the window, or the time an empty bucket takes to fill. */
  abstract windowMs(): number;

  /**
   * For the algorithms that refill continuously (the buckets, GCRA): the
   * milliseconds one unit takes to come back; undefined for the windows.
   */
  abstract unitMs(): number | undefined;

  policy(): Policy {
    return new Policy(this.name ?? this.word.toLowerCase(), this.quota, this.windowMs(), undefined, this.unitMs());
  }

  #spec: { params: Arg[]; policy: Policy } | undefined;

  /** The parameters and the policy, computed once (a limit never changes): what each check sends. */
  get spec(): { readonly params: readonly Arg[]; readonly policy: Policy } {
    return (this.#spec ??= { params: this.params(), policy: this.policy() });
  }

  /** Checks the policy name once, at construction. */
  protected validate(): void {
    this.policy();
  }
}

abstract class Bucket extends Limit {
  readonly capacity: number;
  readonly rate: number;

  constructor(capacity: number, ratePerSecond: number, options?: LimitOptions) {
    super(options);
    this.capacity = integer(capacity, "capacity");
    this.rate = rate(ratePerSecond, "rate");
  }

  params(): Arg[] {
    return [this.capacity, decimalArg(this.rate)];
  }

  get quota(): number {
    return this.capacity;
  }

  windowMs(): number {
    return (this.capacity / this.rate) * 1000;
  }

  unitMs(): number {
    return 1000 / this.rate;
  }
}

abstract class Window extends Limit {
  readonly limit: number;
  readonly window: Duration;
  readonly #windowMs: number;

  constructor(limit: number, window: Duration, options?: LimitOptions) {
    super(options);
    this.limit = integer(limit, "limit");
    this.#windowMs = spanMs(window, "window");
    this.window = window;
  }

  params(): Arg[] {
    return [this.limit, durationArg(this.window, "window")];
  }

  get quota(): number {
    return this.limit;
  }

  windowMs(): number {
    return this.#windowMs;
  }

  unitMs(): undefined {
    return undefined;
  }
}

/** `RL.TOKENBUCKET`: starts full with `capacity`, refills `rate` tokens a second. */
export class TokenBucket extends Bucket {
  readonly word = "TOKENBUCKET";
  constructor(capacity: number, ratePerSecond: number, options?: LimitOptions) {
    super(capacity, ratePerSecond, options);
    this.validate();
  }
}

/** `RL.LEAKYBUCKET`: a queue of `capacity` leaving at `rate` a second; allowed decisions carry `delayMs`. */
export class LeakyBucket extends Bucket {
  readonly word = "LEAKYBUCKET";
  constructor(capacity: number, ratePerSecond: number, options?: LimitOptions) {
    super(capacity, ratePerSecond, options);
    this.validate();
  }
}

export interface SlidingCounterOptions extends LimitOptions {
  /** Sub-windows, 1 to 1000 (the server's default: 1). */
  precision?: number;
}

/** `RL.SLIDINGCOUNTER`: about `limit` requests in any `window`. */
export class SlidingCounter extends Window {
  readonly word = "SLIDINGCOUNTER";
  readonly precision: number | undefined;
  constructor(limit: number, window: Duration, options?: SlidingCounterOptions) {
    super(limit, window, options);
    if (options?.precision !== undefined) {
      integer(options.precision, "precision");
      if (options.precision > 1000) throw new RangeError("precision must be from 1 to 1000");
    }
    this.precision = options?.precision;
    this.validate();
  }

  override params(): Arg[] {
    const words = super.params();
    if (this.precision !== undefined) words.push("PRECISION", this.precision);
    return words;
  }
}

/** `RL.FIXEDWINDOW`: `limit` requests per `window`, windows aligned to the Unix epoch. */
export class FixedWindow extends Window {
  readonly word = "FIXEDWINDOW";
  constructor(limit: number, window: Duration, options?: LimitOptions) {
    super(limit, window, options);
    this.validate();
  }
}

/** `RL.SLIDINGLOG`: exactly at most `limit` requests in any `window`. */
export class SlidingLog extends Window {
  readonly word = "SLIDINGLOG";
  constructor(limit: number, window: Duration, options?: LimitOptions) {
    super(limit, window, options);
    this.validate();
  }
}

/** `RL.GCRA`: `count` per `period`, bursts of `burst` beyond (limit = burst + 1). */
export class GCRA extends Limit {
  readonly word = "GCRA";
  readonly burst: number;
  readonly count: number;
  readonly period: Duration;
  readonly #periodMs: number;

  constructor(burst: number, count: number, period: Duration, options?: LimitOptions) {
    super(options);
    this.burst = integer(burst, "burst", 0);
    this.count = integer(count, "count");
    this.#periodMs = spanMs(period, "period");
    this.period = period;
    this.validate();
  }

  params(): Arg[] {
    return [this.burst, this.count, durationArg(this.period, "period")];
  }

  get quota(): number {
    return this.burst + 1;
  }

  windowMs(): number {
    return (this.#periodMs / this.count) * this.quota;
  }

  unitMs(): number {
    return this.#periodMs / this.count;
  }
}
