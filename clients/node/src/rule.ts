/**
 * What every framework adapter shares: the request as a key function sees
 * it, the key functions, and the rule that turns a request into a check and
 * a decision into a response, with the production safeguards (no silent
 * bypass, circuit breaker and time budget, local denial cache, start-up
 * validation, no two rules on one key).
 */
import { createHash } from "node:crypto";
import { isIP } from "node:net";
import { type RedisAdapter, type RedisLike, adapt, keySlot } from "./adapter.js";
import * as commands from "./commands.js";
import type { Command } from "./commands.js";
import { Decision, type Headers } from "./decision.js";
import { RedisConfigurationError, isUnreachable } from "./errors.js";
import { claimKeys, forgetClaims } from "./claims.js";
import { Alarm, type CircuitBreaker, Guard, type Logger, forgetBreaker, isStartupError } from "./guard.js";
import { GlobalLimit } from "./global.js";
import { type Arg, Limit } from "./limits.js";
import { NamedPolicy, PolicyBook, type PolicyInfo, policyCheckWords, policyGet } from "./policies.js";
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
  /**
   * True when the framework trusts every proxy (Express `trust proxy: true`,
   * Fastify `trustProxy: true`): its address is then the left-most entry of
   * `X-Forwarded-For`, which any client writes.
   */
  trustsEveryProxy?: boolean;
}

/**
 * Who a request counts against. Return a string; `null` to leave this
 * request unlimited on purpose (a health check); `undefined` when the
 * identity cannot be read (it is then limited under one shared identity,
 * or refused: `onMissingIdentity`), never let through silently.
 */
export type KeyFn = (request: RequestInfo) => string | null | undefined;

/** Key functions that read the client's address: a rule warns when the framework trusts every proxy. */
const readsAddress = new WeakSet<KeyFn>();

/** How IPv6 clients are grouped: the prefix length (1 to 128) counted as one client, or false for every address on its own. */
export type Ipv6Subnet = number | false;

/** The 8 groups of an IPv6 address (`::` expanded, a dotted IPv4 tail read), or undefined. */
function ipv6Groups(address: string): number[] | undefined {
  let text = address;
  let tail: number[] = [];
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted !== null) {
    const v4 = dotted.slice(1, 5).map(Number) as [number, number, number, number];
    tail = [(v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]];
    text = `${text.slice(0, dotted.index)}0:0`; // two groups held for the IPv4 tail
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const part = (p: string): number[] => (p === "" ? [] : p.split(":").map((g) => (/^[0-9a-f]{1,4}$/i.test(g) ? parseInt(g, 16) : NaN)));
  const front = part(halves[0] ?? "");
  const back = halves.length === 2 ? part(halves[1] ?? "") : [];
  const groups = halves.length === 2 ? [...front, ...Array<number>(Math.max(0, 8 - front.length - back.length)).fill(0), ...back] : front;
  if (groups.length !== 8 || groups.some((g) => Number.isNaN(g))) return undefined;
  if (tail.length === 2) groups.splice(6, 2, ...tail);
  return groups;
}

/**
 * One spelling per client: brackets, a port and an IPv6 zone taken off, an
 * IPv4-mapped IPv6 address (`::ffff:10.0.0.7`) as its IPv4 address, and an
 * IPv6 address as its first `ipv6Subnet` bits, every group written in full
 * (`2001:db8:0:0:0:0:0:0/56`), so every spelling of one address, and every
 * address of one subnet, is one identity. Undefined for what is not an IP
 * address.
 */
export function normaliseIp(address: string, ipv6Subnet: Ipv6Subnet = 56): string | undefined {
  let a = address.trim();
  if (a.startsWith("[")) {
    const end = a.indexOf("]");
    if (end < 0) return undefined;
    a = a.slice(1, end);
  }
  const v4port = /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(a);
  if (v4port !== null) a = v4port[1] ?? a;
  const zone = a.indexOf("%");
  if (zone >= 0) a = a.slice(0, zone);
  const kind = isIP(a);
  if (kind === 4) return a;
  if (kind !== 6) return undefined;
  const groups = ipv6Groups(a);
  if (groups === undefined) return undefined;
  const [g6 = 0, g7 = 0] = groups.slice(6);
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return [g6 >> 8, g6 & 0xff, g7 >> 8, g7 & 0xff].join(".");
  }
  if (ipv6Subnet === false) return groups.map((g) => g.toString(16)).join(":");
  const masked = groups.map((g, i) => {
    const bits = Math.min(16, Math.max(0, ipv6Subnet - i * 16));
    return bits === 16 ? g : g & ((0xffff << (16 - bits)) & 0xffff);
  });
  return `${masked.map((g) => g.toString(16)).join(":")}/${ipv6Subnet}`;
}

function checkSubnet(ipv6Subnet: unknown): Ipv6Subnet {
  if (ipv6Subnet === false) return false;
  const bits = integer(ipv6Subnet, "ipv6Subnet");
  if (bits > 128) throw new RangeError(`ipv6Subnet must be from 1 to 128, or false, not ${bits}`);
  return bits;
}

/**
 * The client's address as the framework computed it (`req.ip`: behind a
 * proxy, the proxy's unless the framework trusts it), normalised, IPv6
 * grouped by `ipv6Subnet` (default 56, as express-rate-limit 8). What is
 * not an IP address counts as "cannot tell" (undefined).
 */
export function ipKey(options: { ipv6Subnet?: Ipv6Subnet } = {}): KeyFn {
  const subnet = checkSubnet(options.ipv6Subnet ?? 56);
  const fn: KeyFn = (request) => {
    const ip = request.ip ? normaliseIp(request.ip, subnet) : undefined;
    return ip === undefined ? undefined : `ip:${ip}`;
  };
  readsAddress.add(fn);
  return fn;
}

/** The client's address, IPv6 grouped by /56: `ipKey()`. */
export const clientIp: KeyFn = ipKey();

function header(request: RequestInfo, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * The client address as your own proxies saw it: the entry `trustedProxies`
 * places from the right of `header`. Only for apps behind that many proxies,
 * each appending to it: entries further left are whatever the client sent.
 */
export function forwardedIp(
  trustedProxies = 1,
  headerName = "x-forwarded-for",
  options: { ipv6Subnet?: Ipv6Subnet } = {},
): KeyFn {
  integer(trustedProxies, "trustedProxies");
  const subnet = checkSubnet(options.ipv6Subnet ?? 56);
  const fromPeer = ipKey({ ipv6Subnet: subnet });
  return (request) => {
    const hops = (header(request, headerName) ?? "")
      .split(",")
      .map((h) => h.trim())
      .filter((h) => h !== "");
    const hop = hops[hops.length - trustedProxies];
    if (hop === undefined) return fromPeer(request);
    const ip = normaliseIp(hop, subnet);
    return ip === undefined ? undefined : `ip:${ip}`;
  };
}

/**
 * The API key in `headerName`, hashed (a secret does not belong in a Redis
 * key name, where SCAN and MONITOR show it); `fallback` for requests without
 * one (`null`: leave those unlimited).
 */
export function apiKey(headerName = "x-api-key", fallback: KeyFn | null = clientIp): KeyFn {
  const fn: KeyFn = (request) => {
    const value = header(request, headerName);
    if (!value) return fallback === null ? null : fallback(request);
    return `key:${createHash("sha256").update(value).digest("hex").slice(0, 32)}`;
  };
  if (fallback !== null && readsAddress.has(fallback)) readsAddress.add(fn);
  return fn;
}

/** What to do with one request. */
export type Verdict =
  | { action: "pass"; headers: Headers; decision?: Decision }
  | { action: "respond"; status: number; headers: Headers; body: string; decision?: Decision };

/** A limit that counts by its own key function rather than the rule's. */
export interface LimitFor {
  limit: Limit | NamedPolicy;
  key: KeyFn;
}

export type { Logger };

export interface RuleOptions {
  /** The Redis client: ioredis or node-redis, single or cluster (not with a `GlobalLimit`, which has its own). */
  redis?: RedisLike;
  /**
   * One limit, or several checked together with one `RL.ALL` (all or
   * nothing); their names must differ. A limit given as `{ limit, key }`
   * counts by its own key function (per IP and per API key in one check).
   * Or a `GlobalLimit`, alone: one limit for every request this middleware
   * sees, decided from quota leased in batches (stack a second middleware
   * for per-client limits).
   */
  limits: Limit | GlobalLimit | NamedPolicy | ReadonlyArray<Limit | NamedPolicy | LimitFor>;
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
  /**
   * Answer known denials locally until their retry time, or for at most
   * `maxAgeMs` (default 1000): how long a reset elsewhere (another process,
   * an operator's `DEL`) can take to reach this process. Default true;
   * `{ maxEntries, maxAgeMs }` to size it.
   */
  denialCache?: boolean | { maxEntries?: number; maxAgeMs?: number };
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

interface Cached {
  until: number;
  at: number;
  decision: Decision;
}

/**
 * Known denials, answered without a round trip until their retry time, or
 * for at most `maxAgeMs`: an entry is asked again after that, so an
 * operator's reset (`DEL`, `FLUSHALL`, another process's `reset`) reaches
 * this process within `maxAgeMs`, however long the denial was.
 */
class DenialCache {
  private readonly entries = new Map<string, Cached>();
  constructor(
    private readonly maxEntries: number,
    private readonly maxAgeMs: number,
  ) {}

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
    this.entries.set(key, { until: now + Math.min(decision.retryAfterMs, this.maxAgeMs), at: now, decision });
  }

  /** Forgets every entry that names one of `keys`. */
  forget(keys: ReadonlySet<string>): void {
    for (const cacheKey of [...this.entries.keys()]) {
      if (cacheKey.split("\n").some((k) => keys.has(k))) this.entries.delete(cacheKey);
    }
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
  readonly limits: ReadonlyArray<Limit | NamedPolicy>;
  readonly names: readonly string[];
  private readonly tiers: ReadonlyArray<{ limit: Limit | NamedPolicy; key?: KeyFn }>;
  /** The definitions of the rule's named policies, read for the headers and their number of tiers. */
  readonly policies = new PolicyBook();
  readonly breaker: CircuitBreaker;
  private readonly guard: Guard;
  private readonly alarm: Alarm;
  /**
   * Settles when the start-up check (one `RL.PEEK` per limit, sent when the
   * rule is built) has answered: with the configuration error it found
   * (logged once, loudly), or undefined. Never rejects.
   */
  readonly started: Promise<Error | undefined>;
  private readonly options: RuleOptions;
  private readonly cache: DenialCache | undefined;
  /** A rule of one GlobalLimit: every request decided from its leases. */
  private readonly global: GlobalLimit | undefined;
  private readonly logger: Logger;
  private readonly timeoutMs: number;
  private warnedMissing = false;
  private warnedTrust = false;
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
    if (options.limits instanceof GlobalLimit) {
      // One limit for every request, decided from the GlobalLimit's leases:
      // no identity, no key of the rule's own, the GlobalLimit's client and fail mode.
      const global = options.limits;
      const own = ["redis", "key", "onMissingIdentity", "prefix", "scope", "failOpen", "penalty", "shadow", "onShadowDenied", "timeoutMs", "cooldownMs", "denialCache"];
      const given = own.filter((name) => (options as unknown as Record<string, unknown>)[name] !== undefined);
      if (given.length > 0) {
        throw new TypeError(
          `with a GlobalLimit, leave out ${given.join(", ")}: it has its own Redis client, key, failOpen, timeoutMs and cooldownMs (the GlobalLimit's own options)`,
        );
      }
      if (options.cost !== undefined && typeof options.cost !== "function") integer(options.cost, "cost");
      this.global = global;
      this.guard = global.guard;
      this.adapter = global.guard.adapter;
      this.breaker = global.guard.breaker;
      this.timeoutMs = global.guard.timeoutMs;
      this.tiers = [];
      this.limits = [global.limit];
      this.names = [global.limit.policy().name];
      this.cache = undefined;
      this.logger = options.logger ?? console;
      this.alarm = new Alarm(this.logger, `rule GlobalLimit ${global.key}`);
      this.fixedWords = [];
      this.keyBase = () => global.key;
      this.started = global.started;
      return;
    }
    if (options.redis === undefined) throw new TypeError("give the Redis client (redis: an ioredis or node-redis client)");
    this.adapter = adapt(options.redis);
    const given =
      options.limits instanceof Limit || options.limits instanceof NamedPolicy
        ? [options.limits]
        : [...((options.limits as unknown[] | undefined) ?? [])];
    if (given.length === 0) throw new TypeError("give at least one limit (limits: new TokenBucket(10, 1), ...)");
    this.tiers = given.map((tier) => {
      if (tier instanceof Limit || tier instanceof NamedPolicy) return { limit: tier };
      if (tier instanceof GlobalLimit) {
        throw new TypeError(
          "a GlobalLimit is a rule's only limit (limits: globalLimit): its key is not per client, so it cannot join an RL.ALL; " +
            "stack two middlewares to combine it with per-client limits, the per-client one first",
        );
      }
      const t = tier as Partial<LimitFor> | null;
      if (t !== null && typeof t === "object" && (t.limit instanceof Limit || t.limit instanceof NamedPolicy) && typeof t.key === "function") {
        return { limit: t.limit, key: t.key };
      }
      throw new TypeError(`limits must be Limit objects (TokenBucket, ...), NamedPolicy objects, or { limit, key }, not ${String(tier)}`);
    });
    const limits = this.tiers.map((t) => t.limit);
    this.limits = limits;
    this.names = limits.map((l) => (l instanceof NamedPolicy ? l.keyName : l.policy().name));
    if (new Set(this.names).size !== this.names.length) {
      throw new TypeError(
        `the limits' names ${JSON.stringify(this.names)} must differ: each names its Redis key and its RateLimit-Policy item (give each a name)`,
      );
    }
    if (options.cost !== undefined && typeof options.cost !== "function") integer(options.cost, "cost");
    if (options.penalty !== undefined) durationMs(options.penalty, "penalty");
    if ((options.penalty !== undefined || options.shadow === true) && limits.some((l) => l instanceof NamedPolicy)) {
      throw new TypeError(
        "a rule with a named policy takes no penalty or shadow: they are the policy's own (PENALTY, SHADOW in its definition), set where it is defined",
      );
    }
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
    this.guard = new Guard(options.redis, { timeoutMs: options.timeoutMs, cooldownMs: options.cooldownMs });
    this.timeoutMs = this.guard.timeoutMs;
    this.breaker = this.guard.breaker;
    const cache = options.denialCache ?? true;
    if (cache !== true && cache !== false && (cache === null || typeof cache !== "object")) {
      throw new TypeError("denialCache must be true, false or { maxEntries, maxAgeMs }");
    }
    this.cache =
      cache === false || options.shadow === true
        ? undefined
        : new DenialCache(
            integer(cache === true ? 10_000 : (cache.maxEntries ?? 10_000), "denialCache.maxEntries"),
            integer(cache === true ? 1000 : (cache.maxAgeMs ?? 1000), "denialCache.maxAgeMs"),
          );
    this.logger = options.logger ?? console;
    this.alarm = new Alarm(this.logger, `rule ${this.names.join(", ")}`);
    // Two rules on one Redis client (or server) writing the same keys would
    // share their counts without anyone asking for it: refused here, at start-up.
    const mine = this.names.map((name) => `${prefix}:{*}:${options.scope === undefined ? "" : `${options.scope}:`}${name}`);
    claimKeys(
      this.adapter,
      mine,
      JSON.stringify([
        this.limits.map((l) => (l instanceof NamedPolicy ? ["policy", typeof l.name === "function" ? l.keyName : l.name] : [l.word, ...l.spec.params])),
        options.penalty ?? null,
        options.cost ?? 1,
      ]),
      "rule",
      "Give one of them its own scope (scope: 'route-name') or prefix.",
    );
    this.fixedWords = this.optionWords(typeof options.cost === "number" ? options.cost : 1);
    this.keyBase = (identity) => `${prefix}:{${identity}}:${options.scope === undefined ? "" : `${options.scope}:`}`;
    this.started = this.guard.startupError(this.peeks()).then((error) => {
      if (error !== undefined) this.raise(error);
      return error;
    });
  }

  /** One `RL.PEEK` per limit (a named policy of a fixed name: `RL.CHECK ... PEEK`, so it must be defined). */
  private peeks(): Array<Command<Decision>> {
    if (this.global !== undefined) return [commands.peek(this.global.key, this.global.limit)];
    const out: Array<Command<Decision>> = [];
    for (const [i, limit] of this.limits.entries()) {
      const key = this.keyBase("validate") + (this.names[i] ?? "");
      if (limit instanceof Limit) out.push(commands.peek(key, limit));
      else if (typeof limit.name === "string") out.push(policyCheckWords(key, limit.name, new PolicyBook(), ["PEEK"]));
    }
    return out;
  }

  /** Says a configuration error once, with what requests get until it is fixed. */
  private raise(error: Error): void {
    this.alarm.raise(
      error,
      error instanceof RedisConfigurationError
        ? "Requests get an error (500) until it is fixed: never let through unlimited."
        : (this.options.failOpen ?? true)
          ? "Requests are let through unlimited (failOpen) until it is fixed."
          : "Requests are answered 503 (failOpen: false) until it is fixed.",
    );
  }

  /**
   * Forgets `identity` (what the key function returns, e.g. `"ip:10.0.0.7"`):
   * deletes its keys of every limit of this rule in Redis, and its denials
   * in this process's cache. Other processes' caches ask Redis again within
   * `denialCache.maxAgeMs` (1 s by default).
   */
  async reset(identity: string): Promise<void> {
    if (typeof identity !== "string" || identity === "") throw new TypeError("reset needs the identity, a non-empty string");
    if (this.global !== undefined) throw new TypeError("a rule of a GlobalLimit has no identities to reset");
    const keys = this.names.map((name) => this.keyBase(identity) + name);
    this.cache?.forget(new Set(keys));
    await this.adapter.send(["DEL", ...keys], keys[0]);
  }

  private readonly keyBase: (identity: string) => string;

  /**
   * PEEKs each limit once, so a limit the server refuses fails at boot, not
   * per request: throws any error, an outage included (the rule's own
   * start-up check, `started`, does not count an outage as one).
   */
  async validate(): Promise<void> {
    for (const command of this.peeks()) await this.guard.send(command, Math.max(this.timeoutMs, 2000));
  }

  /**
   * The checks for `request`: one command, or on a cluster one per slot
   * when the limits count different identities; null when no limit applies
   * (every key function said null); "refuse" for a missing identity the
   * rule refuses.
   */
  plan(
    request: RequestInfo,
    read = true,
  ): { commands: Command<Decision>[]; cacheKey: string; reads?: Array<Command<PolicyInfo | null>> } | null | "refuse" {
    const pairs: Array<readonly [string, Limit]> = [];
    const named: Array<readonly [string, string, NamedPolicy]> = []; // key, policy name, policy
    for (const [i, tier] of this.tiers.entries()) {
      const keyFn = tier.key ?? this.options.key ?? clientIp;
      if (request.trustsEveryProxy === true && !this.warnedTrust && readsAddress.has(keyFn)) {
        this.warnedTrust = true;
        this.logger.warn(
          "redis-ratelimit: the framework trusts every proxy (Express 'trust proxy' true, Fastify trustProxy true), so the " +
            "client's address is the left-most X-Forwarded-For entry, which any client writes: each request can choose its " +
            "own identity and escape the limit. Trust the number of proxies you run (app.set('trust proxy', 1)), or use forwardedIp(n).",
        );
      }
      let identity = keyFn(request);
      if (identity === null) continue;
      if (identity === undefined || identity === "") {
        if (!this.warnedMissing) {
          this.warnedMissing = true;
          this.logger.warn(
            `redis-ratelimit: cannot tell who sent ${request.method} ${request.path} (no client address, or not an IP address: a unix socket, ` +
              `or a proxy not trusted?); ${this.options.onMissingIdentity === "refuse" ? "such requests are refused (403)" : "such requests share one identity, 'unknown'"}. ` +
              "Give a key function that reads your proxy's header (forwardedIp) or return null to exempt requests on purpose.",
          );
        }
        if (this.options.onMissingIdentity === "refuse") return "refuse";
        identity = "unknown";
      }
      const key = this.keyBase(identity) + this.names[i];
      if (tier.limit instanceof NamedPolicy) named.push([key, tier.limit.resolve(request), tier.limit]);
      else pairs.push([key, tier.limit]);
    }
    if (pairs.length === 0 && named.length === 0) return null;
    if (read) {
      const stale = [...new Set(named.map(([, name]) => name))].filter((name) => this.policies.stale(name));
      if (stale.length > 0) return { commands: [], cacheKey: "", reads: stale.map(policyGet) };
    }
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
    // A named policy is its own RL.CHECK, after the inline limits; its tiers'
    // keys are the rule's key for it, then :0, :1... (the identity is the hash tag).
    for (const [key, name, policy] of named) {
      commandsToRun.push(policyCheckWords(key, name, this.policies, words, undefined, policy.keyName));
    }
    const fixedCost = typeof this.options.cost === "number" ? this.options.cost : 1;
    const keys = [...pairs.map(([k]) => k), ...named.map(([k, name]) => `${k}\n${name}`)];
    return { commands: commandsToRun, cacheKey: `${keys.join("\n")}\n${cost ?? fixedCost}` };
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
    if (this.global !== undefined) return this.decideGlobal(this.global, request);
    let plan = this.plan(request);
    if (plan !== null && plan !== "refuse" && plan.reads !== undefined) {
      const reads = plan.reads;
      try {
        for (const command of reads) this.policies.put(String(command.args[1]), await this.guard.send(command));
      } catch (error) {
        return this.failed(error);
      }
      plan = this.plan(request, false);
    }
    if (plan === null) return { action: "pass", headers: {} };
    if (plan === "refuse") {
      return text(403, "Forbidden: the rate limiter cannot tell who sent this request.\n", {});
    }
    let decision = this.cache?.get(plan.cacheKey, performance.now());
    if (decision === undefined) {
      const decisions: Decision[] = [];
      try {
        for (const command of plan.commands) {
          const d = await this.guard.send(command);
          decisions.push(d);
          if (!d.allowed) break; // the slots after it are not asked, so take nothing
        }
      } catch (error) {
        return this.failed(error);
      }
      decision = plan.commands.length === 1 ? decisions[0]! : combine(decisions);
      this.cache?.set(plan.cacheKey, decision, performance.now());
    }
    return this.verdict(decision, request);
  }

  /**
   * A GlobalLimit's verdict: pass (no headers: what remains is the fleet's,
   * not known here), 429 with `Retry-After` when its limit is spent, the
   * fail mode's 503 when Redis fails with nothing held (fail closed), an
   * error (500) on a configuration error.
   */
  private async decideGlobal(global: GlobalLimit, request: RequestInfo): Promise<Verdict> {
    const cost = typeof this.options.cost === "function" ? integer(this.options.cost(request), "cost") : (this.options.cost ?? 1);
    if (await global.allowAsync(cost)) return { action: "pass", headers: {} };
    const error = global.configurationError;
    if (error instanceof RedisConfigurationError) throw error; // never failed open on: the framework answers 500
    if (global.outage || error !== undefined) {
      return text(503, "Service unavailable: the rate limiter cannot be reached.\n", {});
    }
    const retry = Math.max(1, Math.ceil(global.retryAfterMs() / 1000));
    return text(429, `Too many requests: retry in ${retry} s.\n`, { "Retry-After": String(retry) });
  }

  /** A command failed: the fail mode for an outage or an unusable rule, or throws. */
  private failed(error: unknown): Verdict {
    if (isUnreachable(error)) return this.unreachable(error);
    if (error instanceof RedisConfigurationError) {
      this.raise(error);
      throw error; // never failed open on: the framework answers 500
    }
    if (isStartupError(error)) {
      // A server without the module, or refusing the limit (or a policy it
      // does not hold): said once, then the fail mode; the policies are read again.
      this.policies.forget();
      this.raise(error);
      return this.failMode();
    }
    throw error;
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
    return this.failMode();
  }

  private failMode(): Verdict {
    if (this.options.failOpen ?? true) return { action: "pass", headers: {} };
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
  forgetClaims(adapt(redis));
  forgetBreaker(redis);
}
