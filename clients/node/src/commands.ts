/**
 * Every command as its words and the reading of its reply, with no I/O: the
 * client, the middleware and the adapters share these, so what is sent and
 * what a reply means is written once, for ioredis and node-redis, RESP2 and
 * RESP3 alike.
 */
import { Decision, Lease, Policy } from "./decision.js";
import { type Arg, GCRA, type Limit } from "./limits.js";
import { type Duration, durationArg, durationMs, integer } from "./units.js";

/** The options of every check command and `RL.ALL`. */
export interface CheckOptions {
  /** How much of the limit this request uses (default 1). */
  cost?: number;
  /** Answer what would happen, and change nothing. */
  peek?: boolean;
  /**
   * Wait on the server until allowed, at most this long (ms, or `"2s"`);
   * `Infinity`: no limit. The client's command timeout must be longer.
   */
  block?: Duration;
  /** A denial locks the key for this long: every request is denied until it ends. */
  penalty?: Duration;
  /** Decide, but never deny: a would-be denial comes back allowed with its wait. */
  shadow?: boolean;
}

/** A command to send, and how to read its reply. */
export interface Command<T> {
  readonly name: string;
  readonly args: readonly Arg[];
  /** The keys it names (the first routes it in a cluster); none for `RL.TOP`. */
  readonly keys: readonly string[];
  readonly parse: (reply: unknown) => T;
  /** BLOCK's milliseconds (0: no limit) when the server may hold the reply. */
  readonly blockMs?: number | undefined;
  /** A command about the server (`RL.TOP`): sent to every primary of a cluster, replies merged by `parse`. */
  readonly everyPrimary?: boolean | undefined;
}

/** The option words, the one place they are spelled. A default is left out. */
export function optionWords(options: CheckOptions = {}): Arg[] {
  const words: Arg[] = [];
  for (const name of Object.keys(options)) {
    if (!["cost", "peek", "block", "penalty", "shadow"].includes(name)) {
      throw new TypeError(`unknown option ${JSON.stringify(name)} (cost, peek, block, penalty, shadow)`);
    }
  }
  if (options.cost !== undefined && options.cost !== 1) words.push("COST", integer(options.cost, "cost"));
  if (options.peek === true) words.push("PEEK");
  const block = blockMs(options.block);
  if (block !== undefined) words.push("BLOCK", block);
  if (options.penalty !== undefined) words.push("PENALTY", durationArg(options.penalty, "penalty"));
  if (options.shadow === true) words.push("SHADOW");
  for (const flag of ["peek", "shadow"] as const) {
    if (options[flag] !== undefined && typeof options[flag] !== "boolean") {
      throw new TypeError(`${flag} must be true or false, not ${String(options[flag])}`);
    }
  }
  return words;
}

/**
 * BLOCK's value: whole milliseconds rounded up, `Infinity` as the server's
 * 0 (no limit). 0 is refused: the server reads it as "no limit", a reader
 * of `block: 0` as "do not wait"; leave `block` out not to wait.
 */
export function blockMs(block: Duration | undefined): number | undefined {
  if (block === undefined) return undefined;
  if (block === Infinity) return 0;
  if (block === 0) {
    throw new RangeError("block: 0 is ambiguous: say Infinity for no limit, or leave block out not to wait");
  }
  return Math.ceil(durationMs(block, "block"));
}

function int(value: unknown): number {
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  if (typeof value === "string") return Number(value);
  throw new TypeError(`expected an integer in the reply, got ${String(value)}`);
}

function array(reply: unknown): unknown[] {
  if (!Array.isArray(reply)) throw new TypeError(`expected an array reply, got ${String(reply)}`);
  return reply;
}

function text(value: unknown): string {
  if (typeof value === "string") return value;
  if (value instanceof Uint8Array) return Buffer.from(value).toString();
  return String(value);
}

/** The five integers (and the leaky bucket's delay) as a Decision. */
export function decisionFrom(reply: unknown, policy?: Policy): Decision {
  const r = array(reply);
  const [allowed, limit, remaining, retry, reset] = r.slice(0, 5).map(int) as [number, number, number, number, number];
  const delay = r.length > 5 && !Array.isArray(r[5]) && r[5] !== null ? int(r[5]) : 0;
  return new Decision({
    allowed: allowed === 1,
    limit,
    remaining,
    retryAfterMs: retry < 0 ? null : retry,
    resetAfterMs: reset,
    delayMs: delay,
    policy,
  });
}

function key(value: string): string {
  if (typeof value !== "string" || value.length === 0) {
    throw new TypeError(`a key must be a non-empty string, not ${JSON.stringify(value)}`);
  }
  return value;
}

/** `RL.<ALGORITHM> key <params> [options]`. */
export function check(k: string, limit: Limit, options: CheckOptions = {}): Command<Decision> {
  return checkWords(k, limit, optionWords(options), blockMs(options.block));
}

/** `check` with its option words already spelled (the middleware spells them once, at start-up). */
export function checkWords(k: string, limit: Limit, words: readonly Arg[], block?: number): Command<Decision> {
  const { params, policy } = limit.spec;
  return {
    name: limit.command,
    args: [key(k), ...params, ...words],
    keys: [k],
    parse: (reply) => decisionFrom(reply, policy),
    blockMs: block,
  };
}

/** `RL.PEEK key <ALGORITHM params> [COST n]`: what a check would answer now, changing nothing. */
export function peek(k: string, limit: Limit, cost = 1): Command<Decision> {
  const { params, policy } = limit.spec;
  return {
    name: "RL.PEEK",
    args: [key(k), limit.word, ...params, ...optionWords({ cost })],
    keys: [k],
    parse: (reply) => decisionFrom(reply, policy),
  };
}

/** A reply to `COST n UPTO`: the units taken (0 to n), when (the server's Unix ms), and the five integers. */
export interface Grant {
  readonly granted: number;
  readonly grantedAtMs: number;
  readonly allowed: boolean;
  readonly remaining: number;
  /** Until at least 1 can be granted (ms); 0 when some was. */
  readonly retryAfterMs: number;
  readonly resetAfterMs: number;
}

/**
 * `RL.<ALGORITHM> key <params> COST amount UPTO`: as much of `amount` as the
 * limit allows now, possibly 0 (token bucket, GCRA, fixed window, sliding counter).
 */
export function upto(k: string, limit: Limit, amount: number): Command<Grant> {
  const { params } = limit.spec;
  return {
    name: limit.command,
    args: [key(k), ...params, "COST", integer(amount, "amount"), "UPTO"],
    keys: [k],
    parse: (reply) => {
      const r = array(reply).map(int);
      return {
        allowed: r[0] === 1,
        remaining: r[2] ?? 0,
        retryAfterMs: Math.max(0, r[3] ?? 0),
        resetAfterMs: r[4] ?? 0,
        granted: r[5] ?? 0,
        grantedAtMs: r[6] ?? 0,
      };
    },
  };
}

/** `RL.REFUND key <ALGORITHM params> amount [AT atMs]`: the units the key took back. */
export function refund(k: string, limit: Limit, amount: number, atMs?: number): Command<number> {
  const args: Arg[] = [key(k), limit.word, ...limit.spec.params, integer(amount, "amount")];
  if (atMs !== undefined) args.push("AT", integer(atMs, "at", 0));
  return { name: "RL.REFUND", args, keys: [k], parse: int };
}

/** The tiers of `RL.ALL`: `[key, limit]` pairs, or `{ key: limit }`. */
export type Tiers = ReadonlyArray<readonly [string, Limit]> | Readonly<Record<string, Limit>>;

/** `RL.ALL numkeys key... <ALGORITHM params>... [options]`: every tier or none. */
export function checkAll(tiers: Tiers, options: CheckOptions = {}): Command<Decision> {
  const pairs: Array<readonly [string, Limit]> = Array.isArray(tiers)
    ? [...(tiers as ReadonlyArray<readonly [string, Limit]>)]
    : Object.entries(tiers as Record<string, Limit>);
  if (pairs.length === 0) throw new RangeError("RL.ALL needs at least one [key, limit] tier");
  return checkAllWords(pairs, optionWords(options), blockMs(options.block));
}

/** `checkAll` with its option words already spelled. */
export function checkAllWords(pairs: ReadonlyArray<readonly [string, Limit]>, words: readonly Arg[], block?: number): Command<Decision> {
  const keys = pairs.map(([k]) => key(k));
  const policies = pairs.map(([, limit]) => limit.spec.policy);
  const specs = pairs.flatMap(([, limit]) => [limit.word, ...limit.spec.params]);
  return {
    name: "RL.ALL",
    args: [keys.length, ...keys, ...specs, ...words],
    keys,
    parse: (reply) => {
      const r = array(reply);
      const parts = array(r[5]).map((t, i) => decisionFrom(t, policies[i]));
      const combined = decisionFrom(r.slice(0, 5));
      return combined.with({ delayMs: Math.max(0, ...parts.map((d) => d.delayMs)), tiers: parts });
    },
    blockMs: block,
  };
}

export interface AcquireOptions {
  /** The lease's id (default: the server makes one). */
  id?: string;
  /** Wait on the server for a free slot, at most this long; `Infinity`: no limit. */
  block?: Duration;
}

/** `RL.ACQUIRE key limit lease [ID id] [BLOCK ms]`. */
export function acquire(k: string, limit: number, lease: Duration, options: AcquireOptions = {}): Command<Lease> {
  const policy = new Policy("concurrency", integer(limit, "limit"), undefined, "concurrent-requests");
  const args: Arg[] = [key(k), limit, durationArg(lease, "lease")];
  if (options.id !== undefined) args.push("ID", options.id);
  const block = blockMs(options.block);
  if (block !== undefined) args.push("BLOCK", block);
  return {
    name: "RL.ACQUIRE",
    args,
    keys: [k],
    parse: (reply) => {
      const r = array(reply);
      const d = decisionFrom(r.slice(0, 5), policy);
      const id = r[5] === null || r[5] === undefined ? null : text(r[5]);
      return new Lease(
        {
          allowed: d.allowed,
          limit: d.limit,
          remaining: d.remaining,
          retryAfterMs: d.retryAfterMs,
          resetAfterMs: d.resetAfterMs,
          policy,
        },
        id,
      );
    },
    blockMs: block,
  };
}

/** `RL.RELEASE key id`: true if that id held a live lease. */
export function release(k: string, id: string): Command<boolean> {
  return { name: "RL.RELEASE", args: [key(k), id], keys: [k], parse: (reply) => int(reply) === 1 };
}

/** A field's value in `RL.INFO`. */
export type InfoValue = number | string | InfoValue[];

/** What `RL.INFO` says of a key. */
export interface KeyInfo {
  algorithm: string;
  /** What a request of 1 could take now. */
  remaining: number;
  resetAfterMs: number;
  ttlMs: number;
  /** When the key's latest penalty ends or ended (server clock); null if it never had one. */
  penaltyUntil: Date | null;
  /** Every field the module sent, by name (doubles as numbers under RESP2 and RESP3 alike). */
  fields: Record<string, InfoValue>;
}

function infoValue(value: unknown, name: string): InfoValue {
  if (Array.isArray(value)) return value.map((v) => infoValue(v, ""));
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  const t = text(value);
  if (name !== "algorithm" && t !== "" && Number.isFinite(Number(t))) return Number(t);
  return t;
}

/** Reads `RL.INFO`'s reply: a flat array (RESP2), a Map or an object (RESP3). */
export function parseInfo(reply: unknown): KeyInfo | null {
  if (reply === null || reply === undefined) return null;
  let pairs: Array<[unknown, unknown]>;
  if (reply instanceof Map) pairs = [...(reply as Map<unknown, unknown>).entries()];
  else if (Array.isArray(reply)) {
    pairs = [];
    for (let i = 0; i + 1 < reply.length; i += 2) pairs.push([reply[i], reply[i + 1]]);
  } else if (typeof reply === "object") pairs = Object.entries(reply as Record<string, unknown>);
  else throw new TypeError(`unexpected RL.INFO reply ${JSON.stringify(reply)}`);
  const fields: Record<string, InfoValue> = {};
  for (const [n, v] of pairs) {
    const name = text(n);
    fields[name] = infoValue(v, name);
  }
  const num = (name: string): number => {
    const v = fields[name];
    if (typeof v !== "number") throw new TypeError(`RL.INFO replied ${name} = ${String(v)}, not a number`);
    return v;
  };
  return {
    algorithm: String(fields.algorithm),
    remaining: num("remaining"),
    resetAfterMs: num("reset_after_ms"),
    ttlMs: num("ttl_ms"),
    penaltyUntil: "penalty_until_ms" in fields ? new Date(num("penalty_until_ms")) : null,
    fields,
  };
}

/** `RL.INFO key`: null for a missing key. */
export function info(k: string): Command<KeyInfo | null> {
  return { name: "RL.INFO", args: [key(k)], keys: [k], parse: parseInfo };
}

/** One of the keys denied most: the true count lies between `count - error` and `count`. */
export interface TopEntry {
  key: string;
  count: number;
  /** Only with `withError`. */
  error?: number;
}

function topEntries(reply: unknown, withError: boolean): TopEntry[] {
  const r = array(reply);
  const step = withError ? 3 : 2;
  const out: TopEntry[] = [];
  for (let i = 0; i + step - 1 < r.length; i += step) {
    const entry: TopEntry = { key: text(r[i]), count: int(r[i + 1]) };
    if (withError) entry.error = int(r[i + 2]);
    out.push(entry);
  }
  return out;
}

/**
 * Several servers' lists as one: a key's counts (and errors) added, most
 * first, then surest, then by name; the first `count`. In a cluster a key
 * is served by one primary, so this is the cluster's list.
 */
export function mergeTop(lists: TopEntry[][], count: number): TopEntry[] {
  const merged = new Map<string, TopEntry>();
  for (const list of lists) {
    for (const e of list) {
      const seen = merged.get(e.key);
      if (seen === undefined) merged.set(e.key, { ...e });
      else {
        seen.count += e.count;
        if (seen.error !== undefined && e.error !== undefined) seen.error += e.error;
      }
    }
  }
  return [...merged.values()]
    .sort((a, b) => b.count - a.count || (a.error ?? 0) - (b.error ?? 0) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .slice(0, count);
}

/** `RL.TOP count [WITHERROR]`: the keys denied most; in a cluster, every primary's lists merged. */
export function top(count = 10, withError = false): Command<TopEntry[]> {
  integer(count, "count");
  return {
    name: "RL.TOP",
    args: withError ? [count, "WITHERROR"] : [count],
    keys: [],
    everyPrimary: true,
    parse: (reply) => mergeTop(array(reply).map((r) => topEntries(r, withError)), count),
  };
}

/** `RL.TOP RESET`: forget every count (on every primary). */
export function topReset(): Command<void> {
  return { name: "RL.TOP", args: ["RESET"], keys: [], everyPrimary: true, parse: () => undefined };
}

/**
 * `CL.THROTTLE key max_burst count period [quantity]` (redis-cell's command,
 * `period` in whole seconds), read into a Decision: its reply is in seconds.
 */
export function clThrottle(k: string, maxBurst: number, count: number, periodS: number, quantity = 1): Command<Decision> {
  const policy = new GCRA(maxBurst, count, integer(periodS, "period") * 1000).policy();
  const args: Arg[] = [key(k), maxBurst, count, periodS];
  if (quantity !== 1) args.push(integer(quantity, "quantity", 0));
  return {
    name: "CL.THROTTLE",
    args,
    keys: [k],
    parse: (reply) => {
      const [limited, limit, remaining, retryS, resetS] = array(reply).slice(0, 5).map(int) as [
        number,
        number,
        number,
        number,
        number,
      ];
      const allowed = limited === 0;
      return new Decision({
        allowed,
        limit,
        remaining,
        retryAfterMs: allowed ? 0 : retryS < 0 ? null : retryS * 1000,
        resetAfterMs: resetS * 1000,
        policy,
      });
    },
  };
}

/**
 * Refuses a BLOCK the connection would not wait for: the server holds the
 * reply up to `blockMs`; a client whose command timeout ends first gives up
 * (and may send it again) while the request is still queued.
 */
export function checkBlock(command: Command<unknown>, timeoutMs: number | undefined): void {
  const wait = command.blockMs;
  if (wait === undefined || timeoutMs === undefined || timeoutMs === 0) return;
  if (wait === 0 || timeoutMs <= wait) {
    throw new RangeError(
      `${command.name} with BLOCK (${wait === 0 ? "no limit" : `${wait} ms`}) needs a client that waits longer, ` +
        `but its command timeout is ${timeoutMs} ms: it would give up before the server answers. ` +
        "Give the Redis client a longer timeout (or none), or block for less.",
    );
  }
}

export { durationMs, type Duration };
