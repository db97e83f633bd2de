/**
 * What every framework adapter shares: the request as a key function sees
 * it, the key functions, and the rule that turns a request into a check and
 * a decision into a response, with the production safeguards (no silent
 * bypass, circuit breaker and time budget, local denial cache, start-up
 * validation, no two rules on one key).
 */
import { createHash } from "node:crypto";
import { type RedisAdapter, type RedisLike, adapt, keySlot } from "./adapter.js";
import * as commands from "./commands.js";
import type { Command } from "./commands.js";
import { Decision, type Headers } from "./decision.js";
import { CircuitOpenError, RedisTimeoutError, isUnreachable, translate } from "./errors.js";
import { type Arg, Limit } from "./limits.js";
import { type Duration, durationMs, integer } from "./units.js";

/** A request, as a key function sees it, whatever the framework. */
export interface RequestInfo {
  method: string;
  path: string;
  /** Header fields by lower-case name, as Node's `IncomingMessage` has them. */
  headers: Record<string, string | string[] | undefined>;
  /** The client's address as the framework computed it (Express `req.ip`, Fastify `request.ip`), if any. */
  ip: string | undefined;
  /** The framework's request object. */
  raw: unknown;
}

/**
 * Who a request counts against. Return a string; `null` to leave this
 * request unlimited on purpose (a health check); `undefined` when the
 * identity cannot be read (it is then limited under one shared identity,
 * or refused: `onMissingIdentity`), never let through silently.
 */
export type KeyFn = (request: RequestInfo) => string | null | undefined;

/** The client's address (`req.ip`): behind a proxy, the proxy's unless the framework trusts it. */
export const clientIp: KeyFn = (request) => (request.ip ? `ip:${request.ip}` : undefined);

function header(request: RequestInfo, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * The client address as your own proxies saw it: the entry `trustedProxies`
 * places from the right of `header`. Only for apps behind that many proxies,
 * each appending to it: entries further left are whatever the client sent.
 */
export function forwardedIp(trustedProxies = 1, headerName = "x-forwarded-for"): KeyFn {
  integer(trustedProxies, "trustedProxies");
  return (request) => {
    const hops = (header(request, headerName) ?? "")
      .split(",")
      .map((h) => h.trim())
      .filter((h) => h !== "");
    const hop = hops[hops.length - trustedProxies];
    return hop !== undefined ? `ip:${hop}` : clientIp(request);
  };
}

/**
 * The API key in `headerName`, hashed (a secret does not belong in a Redis
 * key name, where SCAN and MONITOR show it); `fallback` for requests without
 * one (`null`: leave those unlimited).
 */
export function apiKey(headerName = "x-api-key", fallback: KeyFn | null = clientIp): KeyFn {
  return (request) => {
    const value = header(request, headerName);
    if (!value) return fallback === null ? null : fallback(request);
    return `key:${createHash("sha256").update(value).digest("hex").slice(0, 32)}`;
  };
}

/** What to do with one request. */
export type Verdict =
  | { action: "pass"; headers: Headers; decision?: Decision }
  | { action: "respond"; status: number; headers: Headers; body: string; decision?: Decision };

/** A limit that counts by its own key function rather than the rule's. */
export interface LimitFor {
  limit: Limit;
  key: KeyFn;
}

export interface Logger {
  warn(message: string): void;
  info?(message: string): void;
}

export interface RuleOptions {
  /** The Redis client: ioredis or node-redis, single or cluster. */
  redis: RedisLike;
  /**
   * One limit, or several checked together with one `RL.ALL` (all or
   * nothing); their names must differ. A limit given as `{ limit, key }`
   * counts by its own key function (per IP and per API key in one check).
   */
  limits: Limit | ReadonlyArray<Limit | LimitFor>;
  /** Who a request counts against (default `clientIp`). */
  key?: KeyFn;
  /** What to do when `key` cannot read the identity: `"shared"` (default: one identity for all such requests, warned once) or `"refuse"` (403). */
  onMissingIdentity?: "shared" | "refuse";
  /** The start of every Redis key (default `"rl"`). */
  prefix?: string;
  /** A part of the keys, to give two rules on one client their own counts (e.g. the route). */
  scope?: string;
  /** A number, or a function of the request (default 1). */
  cost?: number | ((request: RequestInfo) => number);
  /** When Redis cannot decide: let requests through (true, default) or answer 503 (false). */
  failOpen?: boolean;
  legacyHeaders?: boolean;
  ietfHeaders?: boolean;
  /** A denied identity stays denied that long. */
  penalty?: Duration;
  /** Try the rule without enforcing it: never a 429, nothing taken. */
  shadow?: boolean;
  onShadowDenied?: (request: RequestInfo, decision: Decision) => void;
  /** The most a request waits for Redis (ms, default 200), whatever the client's own timeouts. */
  timeoutMs?: number;
  /** After a failure, how long requests skip Redis before one probes it (ms, default 2000). */
  cooldownMs?: number;
  /** Answer known denials locally until their retry time (default true; `{ maxEntries }` to size it). */
  denialCache?: boolean | { maxEntries?: number };
  /** Where warnings go (default `console`). */
  logger?: Logger;
}

const RULE_OPTIONS = new Set([
  "redis",
  "limits",
  "key",
  "onMissingIdentity",
  "prefix",
  "scope",
  "cost",
  "failOpen",
  "legacyHeaders",
  "ietfHeaders",
  "penalty",
  "shadow",
  "onShadowDenied",
  "timeoutMs",
  "cooldownMs",
  "denialCache",
  "logger",
]);

/** The circuit breaker of one Redis client, shared by every rule on it. */
export class CircuitBreaker {
  private openUntil = 0;
  private probing = false;
  lastError: unknown;

  constructor(readonly cooldownMs: number) {}

  /** Whether a request may ask Redis now: closed, or the one probe after the cool-down. */
  allow(now: number): boolean {
    if (this.openUntil === 0) return true;
    if (now < this.openUntil || this.probing) return false;
    this.probing = true;
    return true;
  }

  success(): void {
    this.openUntil = 0;
    this.probing = false;
  }

  failure(error: unknown, now: number): void {
    this.lastError = error;
    this.openUntil = now + this.cooldownMs;
    this.probing = false;
  }

  get open(): boolean {
    return this.openUntil !== 0;
  }
}

const breakers = new WeakMap<object, CircuitBreaker>();
const claimedKeys = new WeakMap<object, Set<string>>();

/** Sends `command` within `timeoutMs`, through the breaker. */
export async function guarded<T>(
  adapter: RedisAdapter,
  breaker: CircuitBreaker,
  command: Command<T>,
  timeoutMs: number,
): Promise<T> {
  if (!breaker.allow(performance.now())) throw new CircuitOpenError(breaker.lastError);
  const sent = adapter.send([command.name, ...command.args], command.keys[0]);
  sent.catch(() => undefined); // answered after the budget: nobody waits for it any more
  let timer: NodeJS.Timeout | undefined;
  const budget = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisTimeoutError(timeoutMs)), timeoutMs);
  });
  try {
    const reply = await Promise.race([sent, budget]);
    breaker.success();
    return command.parse(reply);
  } catch (error) {
    if (isUnreachable(error)) {
      breaker.failure(error, performance.now());
      throw error;
    }
    breaker.success(); // an error reply: Redis is there
    throw translate(error, command.name);
  } finally {
    clearTimeout(timer);
  }
}

interface Cached {
  until: number;
  at: number;
  decision: Decision;
}

/** Known denials, answered without a round trip until their retry time. */
class DenialCache {
  private readonly entries = new Map<string, Cached>();
  constructor(private readonly maxEntries: number) {}

  get(key: string, now: number): Decision | undefined {
    const hit = this.entries.get(key);
    if (hit === undefined) return undefined;
    if (now >= hit.until) {
      this.entries.delete(key);
      return undefined;
    }
    const elapsed = Math.floor(now - hit.at);
    const age = (d: Decision): Decision =>
      d.with({
        retryAfterMs: d.retryAfterMs === null ? null : Math.max(1, d.retryAfterMs - elapsed),
        resetAfterMs: Math.max(0, d.resetAfterMs - elapsed),
        tiers: d.tiers.map(age),
      });
    return age(hit.decision);
  }

  set(key: string, decision: Decision, now: number): void {
    if (decision.allowed || decision.retryAfterMs === null || decision.retryAfterMs <= 0) return;
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, { until: now + decision.retryAfterMs, at: now, decision });
  }

  get size(): number {
    return this.entries.size;
  }
}

/**
 * One or several limits on every request the key function names, with the
 * production rules. Everything is checked when the rule is built: a wrong
 * option, unit, name or limit fails at start-up, not per request.
 */
export class Rule {
  readonly adapter: RedisAdapter;
  readonly limits: readonly Limit[];
  readonly names: readonly string[];
  private readonly tiers: ReadonlyArray<{ limit: Limit; key?: KeyFn }>;
  readonly breaker: CircuitBreaker;
  private readonly options: RuleOptions;
  private readonly cache: DenialCache | undefined;
  private readonly logger: Logger;
  private readonly timeoutMs: number;
  private warnedMissing = false;
  private lastOutageLog = -Infinity;
  private outages = 0;

  constructor(options: RuleOptions) {
    if (options === null || typeof options !== "object") throw new TypeError("give the rule's options");
    for (const name of Object.keys(options)) {
      if (!RULE_OPTIONS.has(name)) {
        throw new TypeError(`unknown option ${JSON.stringify(name)}; the options are ${[...RULE_OPTIONS].join(", ")}`);
      }
    }
    this.options = options;
    this.adapter = adapt(options.redis);
    const given = options.limits instanceof Limit ? [options.limits] : [...((options.limits as unknown[] | undefined) ?? [])];
    if (given.length === 0) throw new TypeError("give at least one limit (limits: new TokenBucket(10, 1), ...)");
    this.tiers = given.map((tier) => {
      if (tier instanceof Limit) return { limit: tier };
      const t = tier as Partial<LimitFor> | null;
      if (t !== null && typeof t === "object" && t.limit instanceof Limit && typeof t.key === "function") {
        return { limit: t.limit, key: t.key };
      }
      throw new TypeError(`limits must be Limit objects (TokenBucket, ...) or { limit, key }, not ${String(tier)}`);
    });
    const limits = this.tiers.map((t) => t.limit);
    this.limits = limits;
    this.names = limits.map((l) => l.policy().name);
    if (new Set(this.names).size !== this.names.length) {
      throw new TypeError(
        `the limits' names ${JSON.stringify(this.names)} must differ: each names its Redis key and its RateLimit-Policy item (give each a name)`,
      );
    }
    if (options.cost !== undefined && typeof options.cost !== "function") integer(options.cost, "cost");
    if (options.penalty !== undefined) durationMs(options.penalty, "penalty");
    for (const flag of ["failOpen", "legacyHeaders", "ietfHeaders", "shadow"] as const) {
      if (options[flag] !== undefined && typeof options[flag] !== "boolean") {
        throw new TypeError(`${flag} must be true or false, not ${JSON.stringify(options[flag])}`);
      }
    }
    if (options.key !== undefined && typeof options.key !== "function") throw new TypeError("key must be a function of the request");
    if (options.onMissingIdentity !== undefined && !["shared", "refuse"].includes(options.onMissingIdentity)) {
      throw new TypeError('onMissingIdentity must be "shared" or "refuse"');
    }
    const prefix = options.prefix ?? "rl";
    if (prefix === "" || /[{}]/.test(prefix) || (options.scope !== undefined && /[{}]/.test(options.scope))) {
      throw new TypeError("prefix must be non-empty, and prefix and scope without braces (the identity is the hash tag)");
    }
    this.timeoutMs = integer(options.timeoutMs ?? 200, "timeoutMs");
    const cooldown = integer(options.cooldownMs ?? 2000, "cooldownMs");
    let breaker = breakers.get(this.adapter.client);
    if (breaker === undefined) {
      breaker = new CircuitBreaker(cooldown);
      breakers.set(this.adapter.client, breaker);
    }
    this.breaker = breaker;
    const cache = options.denialCache ?? true;
    this.cache =
      cache === false || options.shadow === true
        ? undefined
        : new DenialCache(integer(cache === true ? 10_000 : (cache.maxEntries ?? 10_000), "denialCache.maxEntries"));
    this.logger = options.logger ?? console;
    // Two rules on one Redis client writing the same keys would share their
    // counts without anyone asking for it: refused here, at start-up.
    let claimed = claimedKeys.get(this.adapter.client);
    if (claimed === undefined) {
      claimed = new Set();
      claimedKeys.set(this.adapter.client, claimed);
    }
    const mine = this.names.map((name) => `${prefix}:{*}:${options.scope === undefined ? "" : `${options.scope}:`}${name}`);
    const taken = mine.filter((k) => claimed.has(k));
    if (taken.length > 0) {
      throw new Error(
        `another rule on this Redis client already writes ${taken.join(", ")}: the two would share their counts. ` +
          "Give one of them its own scope (scope: 'route-name') or prefix.",
      );
    }
    for (const k of mine) claimed.add(k);
    this.fixedWords = this.optionWords(typeof options.cost === "number" ? options.cost : 1);
    this.keyBase = (identity) => `${prefix}:{${identity}}:${options.scope === undefined ? "" : `${options.scope}:`}`;
  }

  private readonly keyBase: (identity: string) => string;

  /** PEEKs each limit once, so a limit the server refuses fails at boot, not per request. */
  async validate(): Promise<void> {
    const k = `${this.keyBase("validate")}`;
    for (const [i, limit] of this.limits.entries()) {
      await guarded(this.adapter, this.breaker, commands.peek(k + (this.names[i] ?? ""), limit), Math.max(this.timeoutMs, 2000));
    }
  }

  /**
   * The checks for `request`: one command, or on a cluster one per slot
   * when the limits count different identities; null when no limit applies
   * (every key function said null); "refuse" for a missing identity the
   * rule refuses.
   */
  plan(request: RequestInfo): { commands: Command<Decision>[]; cacheKey: string } | null | "refuse" {
    const pairs: Array<readonly [string, Limit]> = [];
    for (const [i, tier] of this.tiers.entries()) {
      let identity = (tier.key ?? this.options.key ?? clientIp)(request);
      if (identity === null) continue;
      if (identity === undefined || identity === "") {
        if (!this.warnedMissing) {
          this.warnedMissing = true;
          this.logger.warn(
            `redis-ratelimit: cannot tell who sent ${request.method} ${request.path} (no client address: a unix socket, ` +
              `or a proxy not trusted?); ${this.options.onMissingIdentity === "refuse" ? "such requests are refused (403)" : "such requests share one identity, 'unknown'"}. ` +
              "Give a key function that reads your proxy's header (forwardedIp) or return null to exempt requests on purpose.",
          );
        }
        if (this.options.onMissingIdentity === "refuse") return "refuse";
        identity = "unknown";
      }
      pairs.push([this.keyBase(identity) + this.names[i], tier.limit]);
    }
    if (pairs.length === 0) return null;
    const cost = typeof this.options.cost === "function" ? integer(this.options.cost(request), "cost") : undefined;
    const words = cost === undefined ? this.fixedWords : this.optionWords(cost);
    // One RL.ALL can only name keys of one slot: on a cluster, limits of
    // several identities are checked one slot after another, in the rule's order.
    const groups = new Map<number, Array<readonly [string, Limit]>>();
    for (const pair of pairs) {
      const slot = this.adapter.cluster ? keySlot(pair[0]) : 0;
      const group = groups.get(slot);
      if (group === undefined) groups.set(slot, [pair]);
      else group.push(pair);
    }
    const commandsToRun = [...groups.values()].map((group) =>
      group.length === 1 ? commands.checkWords(group[0]![0], group[0]![1], words) : commands.checkAllWords(group, words),
    );
    const fixedCost = typeof this.options.cost === "number" ? this.options.cost : 1;
    return { commands: commandsToRun, cacheKey: `${pairs.map(([k]) => k).join("\n")}\n${cost ?? fixedCost}` };
  }

  private optionWords(cost: number): Arg[] {
    const options: commands.CheckOptions = { cost };
    if (this.options.penalty !== undefined) options.penalty = this.options.penalty;
    if (this.options.shadow === true) options.shadow = true;
    return commands.optionWords(options);
  }

  private readonly fixedWords: readonly Arg[];

  /** The verdict on `request`. Rejects only on a bug (an error reply such as a WRONGTYPE key). */
  async decide(request: RequestInfo): Promise<Verdict> {
    const plan = this.plan(request);
    if (plan === null) return { action: "pass", headers: {} };
    if (plan === "refuse") {
      return text(403, "Forbidden: the rate limiter cannot tell who sent this request.\n", {});
    }
    let decision = this.cache?.get(plan.cacheKey, performance.now());
    if (decision === undefined) {
      const decisions: Decision[] = [];
      try {
        for (const command of plan.commands) {
          const d = await guarded(this.adapter, this.breaker, command, this.timeoutMs);
          decisions.push(d);
          if (!d.allowed) break; // the slots after it are not asked, so take nothing
        }
      } catch (error) {
        if (isUnreachable(error)) return this.unreachable(error);
        throw error;
      }
      decision = plan.commands.length === 1 ? decisions[0]! : combine(decisions);
      this.cache?.set(plan.cacheKey, decision, performance.now());
    }
    return this.verdict(decision, request);
  }

  /** Denied: 429 with the headers. Allowed: pass, with the headers. */
  verdict(decision: Decision, request: RequestInfo): Verdict {
    const headers = decision.headers({
      legacy: this.options.legacyHeaders ?? true,
      ietf: this.options.ietfHeaders ?? true,
    });
    if (decision.allowed) {
      if (decision.shadowDenied) {
        (this.options.onShadowDenied ?? ((r: RequestInfo) => this.logger.info?.(`shadow rate limit would have denied ${r.method} ${r.path}`)))(
          request,
          decision,
        );
      }
      return { action: "pass", headers, decision };
    }
    const retry = decision.retryAfterSeconds();
    return {
      ...text(
        429,
        retry !== undefined
          ? `Too many requests: retry in ${retry} s.\n`
          : "Too many requests: this request is larger than the limit and can never pass.\n",
        headers,
      ),
      decision,
    };
  }

  private unreachable(error: unknown): Verdict {
    const failOpen = this.options.failOpen ?? true;
    this.outages++;
    const now = performance.now();
    if (now - this.lastOutageLog >= 10_000) {
      this.logger.warn(
        `redis-ratelimit: cannot ask Redis (${error instanceof Error ? error.message : String(error)}); ` +
          `${this.outages} request(s) ${failOpen ? "let through" : "refused with 503"} since the last message`,
      );
      this.lastOutageLog = now;
      this.outages = 0;
    }
    if (failOpen) return { action: "pass", headers: {} };
    return text(503, "Service unavailable: the rate limiter cannot be reached.\n", {});
  }
}

/** The answers of several checks (one per cluster slot) as one decision with every tier. */
function combine(decisions: Decision[]): Decision {
  const tiers = decisions.flatMap((d) => (d.tiers.length > 0 ? d.tiers : [d]));
  const denied = tiers.filter((d) => !d.allowed);
  const tightest = tiers.reduce((a, b) => (b.remaining < a.remaining ? b : a));
  return new Decision({
    allowed: denied.length === 0,
    limit: tightest.limit,
    remaining: tightest.remaining,
    retryAfterMs:
      denied.length === 0 ? 0 : denied.some((d) => d.retryAfterMs === null) ? null : Math.max(...denied.map((d) => d.retryAfterMs ?? 0)),
    resetAfterMs: Math.max(...tiers.map((d) => d.resetAfterMs)),
    delayMs: Math.max(...tiers.map((d) => d.delayMs)),
    tiers,
  });
}

function text(status: number, body: string, headers: Headers): Verdict {
  return {
    action: "respond",
    status,
    headers: { "Content-Type": "text/plain; charset=utf-8", ...headers },
    body,
  };
}

/** Releases the keys a rule claimed on its client (for tests and hot reloads). */
export function forgetRules(redis: RedisLike): void {
  claimedKeys.delete(adapt(redis).client);
  breakers.delete(adapt(redis).client);
}
