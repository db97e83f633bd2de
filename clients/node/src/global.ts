/**
 * A leased global limit: one Redis key shared by many processes, quota
 * taken in batches (`COST n UPTO`) and spent locally, what is not spent
 * given back (`RL.REFUND ... AT granted_at_ms`). The Node twin of the Python
 * client's `GlobalLimit` (clients/python/src/redis_ratelimit/global_limit.py).
 *
 * One key is served by one Redis thread; a limit shared by a whole fleet
 * (at most N requests a second to a payments provider, across every app
 * server) can outgrow it. A `GlobalLimit` asks Redis about every `interval`
 * per process under load, and answers each request from what it holds.
 *
 * **The bound.** Quota is debited at Redis when a batch is granted, and
 * spent here at most `maxLease` later; what is left then is refunded:
 * - `FixedWindow`: a lease ends before the window it was granted in, so
 *   every unit is spent inside the window that counted it: allowed per
 *   window <= `limit`. Overage 0.
 * - `TokenBucket`, `GCRA`: allowed in any span T <= `capacity + rate x (T +
 *   2 x maxLease)` (a unit is spent up to `maxLease` after Redis took it,
 *   and a refund comes back at most that late).
 * - `SlidingCounter`: a grant is counted in the sub-window of its moment,
 *   a refund leaves that sub-window exactly, and a lease ends with that
 *   sub-window (`WINDOW_MARGIN_MS` before it); so the sliding estimate made
 *   of what was spent never passes `limit`. Overage 0.
 *
 * **Fair split** (`FairSplit`, the same rule as the Python client's). A
 * process is *scarce* once a grant came back short (less than it asked),
 * and leaves scarcity only on a grant that came back whole *and* left at
 * Redis at least as much again as it asked. While scarce it asks at a
 * cadence with a random part, no sooner than `interval x (1 + U)` after its
 * previous ask (U uniform in [0, 1); never early because it ran dry), and
 * each ask is at most one interval of its own measured demand. Out of
 * scarcity, batches of about two intervals of demand.
 *
 * **Failures.** Redis down or slow: requests are answered from what is
 * held; once that is spent, `failOpen` decides, behind the Redis client's
 * circuit breaker (guard.ts). A refund that fails is retried once, then
 * counted (`refundsLost`) and logged, never silently lost.
 */
import type { RedisLike } from "./adapter.js";
import * as commands from "./commands.js";
import { CircuitOpenError, RedisConfigurationError, isUnreachable } from "./errors.js";
import { Alarm, Guard, type Logger } from "./guard.js";
import { FixedWindow, GCRA, type Limit, SlidingCounter, TokenBucket } from "./limits.js";
import { type Duration, durationMs, integer } from "./units.js";

/** The algorithms that offer `COST n UPTO` and `RL.REFUND`. */
const LEASABLE = [TokenBucket, GCRA, FixedWindow, SlidingCounter] as const;

/** A fixed-window lease ends this long before its window, so no unit is spent after the window that counted it. */
const WINDOW_MARGIN_MS = 5;

export interface GlobalLimitOptions {
  /** The longest a batch is spent before what is left goes back (default 1000 ms). */
  maxLease?: Duration;
  /** About how often Redis is asked under load (default 25 ms); below `maxLease`. */
  interval?: Duration;
  /** Without a request for this long, what is held goes back (default 4 intervals, at least 100 ms). */
  idle?: Duration;
  /** The most one grant asks for (default a quarter of the limit's quota). */
  maxBatch?: number;
  /** With nothing held and Redis failing: allow (true, default) or deny. */
  failOpen?: boolean;
  /** The most one call waits for Redis (ms, default 200: the guard's). */
  timeoutMs?: number;
  /** After a failure, how long calls skip Redis before one probes it (ms, default 2000; one breaker per Redis client). */
  cooldownMs?: number;
  /** Where warnings go (default `console`). */
  logger?: Logger;
  /** The random part of a scarce process's cadence: uniform in [0, 1) (default `Math.random`; a fixed one for tests). */
  random?: () => number;
}

const OPTIONS = new Set(["maxLease", "interval", "idle", "maxBatch", "failOpen", "timeoutMs", "cooldownMs", "logger", "random"]);

/**
 * The fair split's decisions, with no I/O and no clock of its own (every
 * time is a `performance.now()` in ms, given): when a process asks Redis,
 * for how much, and what a grant's reply changes. `GlobalLimit` drives it.
 *
 * Why each part (measured with 4 equal paced processes at 2x a token bucket,
 * docs/clients.md): a token bucket refills continuously, so each ask gets
 * what accumulated since the previous ask by anyone, and the ask after the
 * longest gap gets most. So a scarce process asks at most one interval of
 * its own demand, at a cadence whose random part keeps the processes from
 * holding one order (with a fixed cadence the same process keeps the long
 * gap); and a whole grant that emptied the limit does not end scarcity (a
 * cadence ask of one interval's demand is often granted whole from what
 * refilled, leaving nothing: back to big early batches, whoever did so won).
 */
export class FairSplit {
  /** A grant came back short, and none since came back whole leaving as much again at Redis. */
  scarce = false;
  /** While scarce: no ask before this. */
  nextAsk = 0;
  /** The last grant was 0: nothing to ask for before this (the limit's retry-after, at least half an interval). */
  emptyUntil = 0;

  constructor(
    readonly intervalMs: number,
    readonly maxBatch: number,
    private readonly random: () => number = Math.random,
  ) {}

  /**
   * Units to ask Redis for at `now` (0: none now), given what is `held` and
   * the measured `demand` (units a ms). An ask while scarce sets the next
   * one's earliest time.
   */
  want(now: number, demand: number, held: number): number {
    if (demand <= 0 || now < this.emptyUntil) return 0;
    let want = 0;
    if (this.scarce) {
      if (now < this.nextAsk) return 0;
      // One interval of its own demand, then one interval and a random part of another.
      want = Math.ceil(demand * this.intervalMs) - held;
      // (kept in [0, 1) whatever an injected `random` returns: this runs on a timer, where a throw would end the process)
      const u = Math.min(Math.max(Number(this.random()) || 0, 0), 1 - Number.EPSILON);
      this.nextAsk = now + this.intervalMs * (1 + u);
    } else if (held < demand * this.intervalMs) {
      // Enough for two intervals: one to use, one to refill in.
      want = Math.ceil(demand * 2 * this.intervalMs) - held;
      this.nextAsk = now + this.intervalMs;
    }
    return Math.max(0, Math.min(want, this.maxBatch));
  }

  /**
   * A reply to an ask of `asked` (sent at `askedAt`) came at `now`: `granted`
   * of it, `remaining` left at Redis, `retryAfterMs` until 1 can be.
   */
  granted(now: number, asked: number, grant: Pick<commands.Grant, "granted" | "remaining" | "retryAfterMs">, askedAt = now): void {
    if (grant.granted < asked) {
      // (an ask a request made itself, not `want`'s, set no cadence yet)
      if (!this.scarce) this.nextAsk = Math.max(this.nextAsk, askedAt + this.intervalMs);
      this.scarce = true;
    } else if (grant.remaining >= asked) {
      this.scarce = false;
    }
    // (whole, but it left less than that at Redis: unchanged)
    if (grant.granted === 0) this.emptyUntil = now + Math.max(grant.retryAfterMs, this.intervalMs / 2);
  }

  /** Whether asks are held back at `now` (scarce: only at its cadence; or the limit spent): a request then neither wakes the loop nor asks itself. */
  waiting(now: number): boolean {
    return this.scarce || now < this.emptyUntil;
  }

  /** The earliest an ask may be made (for the loop's timer). */
  due(): number {
    return Math.max(this.emptyUntil, this.scarce ? this.nextAsk : 0);
  }
}

/** The end (Unix ms, rounded up) of the sliding counter's sub-window holding `atMs`: sub-windows are `window / precision` long, from the epoch. */
export function subWindowEndMs(limit: SlidingCounter, atMs: number): number {
  const window = Math.max(1, limit.windowMs());
  const precision = limit.precision ?? 1;
  const k = Math.floor((atMs * precision) / window);
  return Math.ceil(((k + 1) * window) / precision);
}

/** What a `GlobalLimit` did, in units of quota (requests for the request counters). */
export interface GlobalLimitStats {
  /** Units Redis granted. */
  granted: number;
  /** Units spent from grants (allowed requests' costs). */
  spent: number;
  /** Units Redis took back (refunds' replies). */
  refunded: number;
  /** Units sent back that Redis did not take (a window that had ended, a full bucket): quota lost, never overage. */
  refundDeclined: number;
  /** Units whose refund failed twice: logged, never sent. */
  refundsLost: number;
  /** Requests allowed without quota because Redis failed (`failOpen`). */
  failedOpen: number;
  /** Requests denied because Redis failed (fail closed, or a configuration error). */
  failedClosed: number;
  /** Requests denied because the limit had nothing left (the last grant came back short). */
  denied: number;
  /** Requests denied because nothing was held although the limit may have had some (demand rose faster than the batches): under-use. */
  starved: number;
  /** Grant requests sent to Redis (refunds not included; not those the circuit breaker skipped). */
  calls: number;
  /** Units held right now. */
  held: number;
}

interface Held {
  amount: number;
  grantedAtMs: number;
  /** performance.now() from which it is no longer spent. */
  expires: number;
}

/**
 * One limit on one Redis `key`, shared by every process that makes a
 * `GlobalLimit` of it, decided locally from quota leased in batches.
 *
 * `allow(cost)` answers at once from what is held, never waiting on Redis.
 * A background loop (timers, unref'd: it keeps no process alive) keeps
 * quota ahead of this process's demand. The first request, with nothing
 * held and no demand seen yet, cannot be foreseen: `allow()` denies it (and
 * counts it `starved`) while the loop asks; `allowAsync()` asks Redis for
 * it on its own path, as the middleware does. `close()` gives back what is
 * held.
 */
export class GlobalLimit {
  readonly key: string;
  readonly limit: Limit;
  readonly maxLeaseMs: number;
  readonly intervalMs: number;
  readonly idleMs: number;
  readonly maxBatch: number;
  readonly failOpen: boolean;
  /** The guard of its Redis client (time budget, the client's circuit breaker). */
  readonly guard: Guard;
  /**
   * Settles when the start-up check (one `RL.PEEK` of the key, which takes
   * nothing) has answered: with the configuration error it found (logged
   * once, loudly), or undefined. Never rejects.
   */
  readonly started: Promise<Error | undefined>;
  private readonly logger: Logger;
  private readonly alarm: Alarm;
  /** Live leases, the one to end first first (spent first). */
  private leases: Held[] = [];
  /** Leases ended and not yet refunded (the loop sends them). */
  private expired: Held[] = [];
  private held = 0;
  private readonly counts: GlobalLimitStats = {
    granted: 0,
    spent: 0,
    refunded: 0,
    refundDeclined: 0,
    refundsLost: 0,
    failedOpen: 0,
    failedClosed: 0,
    denied: 0,
    starved: 0,
    calls: 0,
    held: 0,
  };
  // Demand: units asked for since the last estimate, and the estimate
  // (units a millisecond, an exponentially weighted average).
  private asked = 0;
  private rate = 0;
  private lastEstimate = performance.now();
  private lastRequest = -Infinity;
  /** The fair split: scarce or not, when the next ask may be, and for how much. */
  private readonly fair: FairSplit;
  private failing = false;
  /** An error reply other than an outage (a configuration error, a server without the module): no ask before `pausedUntil`. */
  private broken: Error | undefined;
  private pausedUntil = 0;
  private lastOutageLog = -Infinity;
  /** Refunds that failed once: sent again by the next turn of the loop, or by close(). */
  private retries: Array<[number, number]> = [];
  private readonly inFlight = new Set<Promise<void>>();
  private fetching: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private woken = false;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(redis: RedisLike, key: string, limit: Limit, options: GlobalLimitOptions = {}) {
    if (typeof key !== "string" || key === "") throw new TypeError("a GlobalLimit needs its key, a non-empty string");
    if (!LEASABLE.some((kind) => limit instanceof kind)) {
      const what = limit !== null && typeof limit === "object" ? limit.constructor.name : String(limit);
      throw new TypeError(
        `a GlobalLimit leases from TokenBucket, GCRA, FixedWindow or SlidingCounter (the algorithms with COST n UPTO and RL.REFUND), not ${what}`,
      );
    }
    if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
    for (const name of Object.keys(options)) {
      if (!OPTIONS.has(name)) throw new TypeError(`unknown option ${JSON.stringify(name)}; the options are ${[...OPTIONS].join(", ")}`);
    }
    this.key = key;
    this.limit = limit;
    this.maxLeaseMs = durationMs(options.maxLease ?? 1000, "maxLease");
    this.intervalMs = durationMs(options.interval ?? 25, "interval");
    if (this.intervalMs >= this.maxLeaseMs) throw new RangeError("interval must be below maxLease");
    this.idleMs = options.idle !== undefined ? durationMs(options.idle, "idle") : Math.max(100, 4 * this.intervalMs);
    this.maxBatch = options.maxBatch !== undefined ? integer(options.maxBatch, "maxBatch") : Math.max(1, Math.floor(limit.quota / 4));
    if (options.failOpen !== undefined && typeof options.failOpen !== "boolean") {
      throw new TypeError(`failOpen must be true or false, not ${JSON.stringify(options.failOpen)}`);
    }
    this.failOpen = options.failOpen ?? true;
    if (options.random !== undefined && typeof options.random !== "function") throw new TypeError("random must be a function returning a number in [0, 1)");
    this.fair = new FairSplit(this.intervalMs, this.maxBatch, options.random);
    this.guard = new Guard(redis, { timeoutMs: options.timeoutMs, cooldownMs: options.cooldownMs });
    this.logger = options.logger ?? console;
    this.alarm = new Alarm(this.logger, `GlobalLimit ${key}`);
    this.started = this.guard.startupError([commands.peek(key, limit)]).then((error) => {
      if (error !== undefined) this.raise(error);
      return error;
    });
    this.schedule(performance.now());
  }

  // The request path ---------------------------------------------------------

  /**
   * True when the request may go ahead (its `cost` spent from the quota
   * held). Never waits: with nothing held it answers by what is known (the
   * limit is spent: false; Redis failing: `failOpen`; else false, counted
   * `starved`, and the loop asks at once).
   */
  allow(cost = 1): boolean {
    if (cost !== 1) integer(cost, "cost");
    const now = performance.now();
    this.asked += cost;
    this.lastRequest = now;
    if (this.take(cost, now)) {
      if (!this.woken && !this.fair.scarce && this.held < this.demand(now) * this.intervalMs) this.wake();
      return true;
    }
    return this.without(now);
  }

  /**
   * `allow()`, except when nothing is held for this request while the limit
   * is not known to be spent nor Redis to fail (the first request, before any
   * demand was seen; a jump in demand the batches have not caught up with):
   * then it waits for a grant (the one in flight, or one it asks for at
   * once), at most one round trip (`timeoutMs`), rather than denying a
   * request the limit may allow. The middleware decides with it.
   */
  async allowAsync(cost = 1): Promise<boolean> {
    if (cost !== 1) integer(cost, "cost");
    const now = performance.now();
    if (
      this.held >= cost ||
      this.closed ||
      this.failing ||
      this.fair.waiting(now) ||
      now < this.pausedUntil ||
      this.guard.breaker.open
    ) {
      return this.allow(cost);
    }
    this.asked += cost;
    this.lastRequest = now;
    if (this.fetching === undefined) {
      const want = Math.min(this.maxBatch, Math.ceil(this.demand(now) * 2 * this.intervalMs) - this.held);
      void this.startFetch(Math.max(cost, want));
    }
    await this.fetching;
    const after = performance.now();
    if (this.take(cost, after)) return true;
    return this.without(after);
  }

  /** Nothing held for this request: the fail mode, the limit's word, or starved. */
  private without(now: number): boolean {
    // Ran dry: ask now, unless scarce (a scarce process asks at its cadence
    // only), the limit spent, or Redis failing (the loop asks again at its own pace).
    if (!this.fair.waiting(now) && !this.failing) this.wake();
    if (this.broken !== undefined && now < this.pausedUntil) {
      if (this.broken instanceof RedisConfigurationError || !this.failOpen) {
        this.counts.failedClosed++;
        return false;
      }
      this.counts.failedOpen++;
      return true;
    }
    if (this.failing) {
      if (this.failOpen) {
        this.counts.failedOpen++;
        return true;
      }
      this.counts.failedClosed++;
      return false;
    }
    if (this.fair.waiting(now)) this.counts.denied++;
    else this.counts.starved++;
    return false;
  }

  /** Spends `cost` from live leases, the one ending first first. */
  private take(cost: number, now: number): boolean {
    const first = this.leases[0];
    if (first !== undefined && first.expires <= now) this.dropExpired(now);
    if (this.held < cost) return false;
    let left = cost;
    while (left > 0) {
      const lease = this.leases[0]!;
      const used = Math.min(left, lease.amount);
      lease.amount -= used;
      left -= used;
      if (lease.amount === 0) this.leases.shift();
    }
    this.held -= cost;
    this.counts.spent += cost;
    return true;
  }

  private dropExpired(now: number): void {
    while (this.leases.length > 0 && this.leases[0]!.expires <= now) {
      const lease = this.leases.shift()!;
      this.held -= lease.amount;
      this.expired.push(lease);
    }
  }

  /** Units a millisecond: the average, or what was asked since it was last taken when that is more (demand rising). */
  private demand(now: number): number {
    const elapsed = now - this.lastEstimate;
    const current = elapsed >= 2 ? this.asked / elapsed : 0;
    return Math.max(this.rate, current);
  }

  private estimate(now: number): void {
    const elapsed = now - this.lastEstimate;
    if (elapsed < this.intervalMs / 2) return;
    const sample = this.asked / elapsed;
    this.rate = this.rate === 0 ? sample : 0.5 * this.rate + 0.5 * sample;
    if (this.rate < 0.5 / this.maxLeaseMs && this.asked === 0) this.rate = 0; // demand gone
    this.asked = 0;
    this.lastEstimate = now;
  }

  // The loop -----------------------------------------------------------------

  /** Runs the loop's next turn now (a request found less held than one interval's demand). */
  private wake(): void {
    if (this.woken || this.closed || this.fetching !== undefined) return;
    this.woken = true;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.turn(), 0);
    this.timer.unref();
  }

  /** The next turn: in half an interval, or sooner when a lease ends or a scarce process's next ask is due. */
  private schedule(now: number): void {
    if (this.closed) return;
    let at = now + this.intervalMs / 2;
    const first = this.leases[0];
    if (first !== undefined) at = Math.min(at, first.expires);
    const due = this.fair.due();
    if (due > now) at = Math.min(at, due);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.turn(), Math.max(0, at - now));
    this.timer.unref();
  }

  private turn(): void {
    this.woken = false;
    this.timer = undefined;
    if (this.closed) return;
    const now = performance.now();
    let demand = this.demand(now);
    this.estimate(now);
    demand = Math.max(demand, this.rate);
    this.dropExpired(now);
    const gone = this.expired;
    this.expired = [];
    const idle = now - this.lastRequest >= this.idleMs;
    if (idle && this.held > 0) {
      gone.push(...this.leases);
      this.leases = [];
      this.held = 0;
    }
    let want = 0;
    if (!idle && this.fetching === undefined && now >= this.pausedUntil) want = this.fair.want(now, demand, this.held);
    const retries = this.retries;
    this.retries = [];
    for (const lease of gone) if (lease.amount > 0) this.track(this.refund(lease.amount, lease.grantedAtMs, true));
    for (const [amount, at] of retries) this.track(this.refund(amount, at, false));
    if (want >= 1) void this.startFetch(want);
    this.schedule(now);
  }

  private track(work: Promise<void>): void {
    this.inFlight.add(work);
    void work.finally(() => this.inFlight.delete(work));
  }

  private startFetch(amount: number): Promise<void> {
    const fetching = this.fetch(amount).finally(() => {
      this.fetching = undefined;
      this.schedule(performance.now());
    });
    this.fetching = fetching;
    return fetching;
  }

  /** Asks Redis for up to `amount`, and holds what comes. */
  private async fetch(amount: number): Promise<void> {
    const start = performance.now();
    this.counts.calls++;
    let grant: commands.Grant;
    try {
      grant = await this.guard.send(commands.upto(this.key, this.limit, amount));
    } catch (error) {
      if (error instanceof CircuitOpenError) this.counts.calls--; // skipped by the breaker: not sent
      if (isUnreachable(error)) {
        const now = performance.now();
        if (!this.failing || now - this.lastOutageLog >= 10_000) {
          this.lastOutageLog = now;
          this.logger.warn(
            `redis-ratelimit (GlobalLimit ${this.key}): cannot ask Redis (${error instanceof Error ? error.message : String(error)}); ` +
              `spending what is held, then ${this.failOpen ? "allowing" : "denying"} (failOpen: ${String(this.failOpen)})`,
          );
        }
        this.failing = true;
      } else {
        // Not an outage: a password or permission refused, no module, a
        // limit refused, a key of another type. Said once, loudly; asked
        // again after the cool-down.
        this.broken = error instanceof Error ? error : new Error(String(error));
        this.pausedUntil = performance.now() + this.guard.breaker.cooldownMs;
        this.raise(this.broken);
      }
      return;
    }
    this.failing = false;
    this.broken = undefined;
    this.counts.granted += grant.granted;
    // A lease ends with the window (fixed window) or sub-window (sliding
    // counter) that counted it, timed from before the ask was sent.
    let leaseMs = this.maxLeaseMs;
    if (this.limit instanceof FixedWindow) leaseMs = Math.min(leaseMs, grant.resetAfterMs - WINDOW_MARGIN_MS);
    else if (this.limit instanceof SlidingCounter) {
      leaseMs = Math.min(leaseMs, subWindowEndMs(this.limit, grant.grantedAtMs) - grant.grantedAtMs - WINDOW_MARGIN_MS);
    }
    this.fair.granted(performance.now(), amount, grant, start);
    if (grant.granted === 0) return;
    if (this.closed) {
      // close() has given back what was held already: this goes back too (close() waits for it).
      await this.refund(grant.granted, grant.grantedAtMs, true);
      return;
    }
    const lease: Held = { amount: grant.granted, grantedAtMs: grant.grantedAtMs, expires: start + leaseMs };
    if (leaseMs <= 0) {
      this.expired.push(lease);
      return;
    }
    let i = this.leases.length;
    while (i > 0 && this.leases[i - 1]!.expires > lease.expires) i--;
    this.leases.splice(i, 0, lease);
    this.held += grant.granted;
  }

  private async refund(amount: number, atMs: number, retry: boolean): Promise<void> {
    let back: number;
    try {
      back = await this.guard.send(commands.refund(this.key, this.limit, amount, atMs));
    } catch (error) {
      if (retry) {
        this.retries.push([amount, atMs]);
        return;
      }
      this.counts.refundsLost += amount;
      this.logger.warn(
        `redis-ratelimit (GlobalLimit ${this.key}): could not refund ${amount} unit(s) granted at ${atMs} ms ` +
          `(${error instanceof Error ? error.message : String(error)}), twice; counted in refundsLost`,
      );
      return;
    }
    this.counts.refunded += back;
    this.counts.refundDeclined += amount - back;
  }

  private raise(error: Error): void {
    this.alarm.raise(
      error,
      error instanceof RedisConfigurationError
        ? "Requests beyond what is held are denied until it is fixed: never let through unlimited."
        : this.failOpen
          ? "Requests beyond what is held are let through (failOpen) until it is fixed."
          : "Requests beyond what is held are denied (failOpen: false) until it is fixed.",
    );
  }

  // The rest -----------------------------------------------------------------

  /** Whether Redis failed at the last ask (an outage): with nothing held, the fail mode answers. */
  get outage(): boolean {
    return this.failing;
  }

  /** The configuration error met at the last ask (a password refused, no module...), if any. */
  get configurationError(): Error | undefined {
    return this.broken;
  }

  /** While the limit is known to be spent here, about how long until this process asks again (ms); 0 otherwise. */
  retryAfterMs(): number {
    const now = performance.now();
    return this.fair.waiting(now) ? Math.max(0, this.fair.due() - now) : 0;
  }

  /** A copy of the counters. */
  stats(): GlobalLimitStats {
    return { ...this.counts, held: this.held };
  }

  /**
   * Stops the loop and gives back what is held (a grant still in flight
   * goes back when it lands); a refund that fails is retried once at once,
   * then counted in `refundsLost` and logged. Resolves when that is done.
   */
  close(): Promise<void> {
    if (this.closing !== undefined) return this.closing;
    this.closed = true;
    clearTimeout(this.timer);
    this.closing = (async () => {
      if (this.fetching !== undefined) await this.fetching;
      await Promise.all([...this.inFlight]);
      const gone = [...this.expired, ...this.leases];
      this.expired = [];
      this.leases = [];
      this.held = 0;
      await Promise.all(gone.filter((l) => l.amount > 0).map((l) => this.refund(l.amount, l.grantedAtMs, true)));
      const again = this.retries;
      this.retries = [];
      await Promise.all(again.map(([amount, at]) => this.refund(amount, at, false)));
    })();
    return this.closing;
  }
}
