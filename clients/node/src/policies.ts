/**
 * Named policies: limits held in Redis (`RL.POLICY SET`) and checked by
 * name (`RL.CHECK`), so a limit is changed once, by whoever owns it, and
 * every service checking it follows without a redeploy.
 *
 * A `NamedPolicy` goes wherever a `Limit` goes (the client's `check`, a
 * `Rule`, so the Express and Fastify middleware). `RL.CHECK` answers what
 * the inline command would; the definition (`RL.POLICY GET`, kept
 * `POLICY_MAX_AGE_MS`) is read only to write the same headers, since the
 * window and refill are not in the reply. `syncPolicies` is the worker's
 * call: validate everywhere, apply to every primary, compare digests.
 */
import { readFile } from "node:fs/promises";
import { type PrimaryNode, type RedisAdapter, type RedisLike, adapt } from "./adapter.js";
import { type CheckOptions, type Command, blockMs, decisionFrom, optionWords } from "./commands.js";
import { type Decision, Policy } from "./decision.js";
import { isErrorReply } from "./errors.js";
import { type Arg, FixedWindow, GCRA, LeakyBucket, type Limit, SlidingCounter, SlidingLog, TokenBucket } from "./limits.js";
import type { Duration } from "./units.js";

/** How long a definition read from Redis is used for the headers (ms); a reply whose limit differs has it read at once. */
export const POLICY_MAX_AGE_MS = 5000;

const NAME = /^[\x21-\x7e]{1,128}$/;

/** `name` if this client takes it as a policy name (1 to 128 printable ASCII characters, no space), else a RangeError. */
export function checkPolicyName(name: unknown): string {
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new RangeError(`policy name ${JSON.stringify(name)} must be 1 to 128 printable ASCII characters, no spaces`);
  }
  return name;
}

/**
 * A policy held in Redis, by its name: `new NamedPolicy("plan:pro")`. In a
 * `Rule`, the name may be a function of the request (the plan of its API
 * key); `label` then names the rule's keys, which stay the same when a
 * client moves from one plan to another. A policy of several tiers takes
 * one key per tier (`policyKeys`).
 */
export class NamedPolicy {
  readonly name: string | ((request: never) => string);
  readonly label: string | undefined;

  constructor(name: string | ((request: never) => string), options: { label?: string } = {}) {
    if (typeof name === "function") {
      if (options.label === undefined) {
        throw new TypeError("a NamedPolicy whose name is a function of the request needs a label (it names the rule's keys)");
      }
    } else checkPolicyName(name);
    if (options.label !== undefined) checkPolicyName(options.label);
    this.name = name;
    this.label = options.label;
  }

  /** What names the rule's keys and its `RateLimit` item. */
  get keyName(): string {
    return this.label ?? (this.name as string);
  }

  /** The policy's name, for `request` when it is a function. */
  resolve(request: unknown): string {
    if (typeof this.name !== "function") return this.name;
    return checkPolicyName((this.name as (r: unknown) => unknown)(request));
  }

  /** The name, when it is one (a client's check); a TypeError for a function. */
  staticName(): string {
    if (typeof this.name === "function") {
      throw new TypeError('a NamedPolicy whose name is a function of the request is for a Rule; give the client a name: new NamedPolicy("plan:pro")');
    }
    return this.name;
  }
}

/** Whether `key` holds a hash tag (`{...}`, non-empty) that a cluster routes by. */
export function hasHashTag(key: string): boolean {
  const open = key.indexOf("{");
  if (open < 0) return false;
  const close = key.indexOf("}", open + 1);
  return close > open + 1;
}

/**
 * The keys of a policy of `tiers` tiers for `key`: the key itself for one
 * tier; for several `<key>:0`, `<key>:1`, ..., the key put in braces first
 * when it holds no hash tag (`{user:42}:0`), so all are in one cluster slot.
 */
export function policyKeys(key: string, tiers: number): string[] {
  if (tiers <= 1) return [key];
  const base = hasHashTag(key) ? key : `{${key}}`;
  return Array.from({ length: tiers }, (_, i) => `${base}:${i}`);
}

/** What `RL.POLICY SET` takes after the name. */
export interface PolicyDefinition {
  tiers: Limit[];
  penalty?: Duration;
  shadow?: boolean;
  /** `KEEP` (the module's default), `SCALE` or `RESET`. */
  onChange?: "KEEP" | "SCALE" | "RESET";
}

const ON_CHANGE = ["KEEP", "SCALE", "RESET"] as const;

/** A duration word as the server writes it (`"60000ms"`, or seconds without a unit) in this client's terms. */
function durationWord(word: string): string {
  return /^(\d+(\.\d*)?|\.\d+)$/.test(word) ? `${word}s` : word;
}

/** A definition read from its words (`RL.POLICY GET`'s); throws naming the word it cannot read. */
export function parseDefinition(words: readonly unknown[]): PolicyDefinition {
  const ws = words.map((w) => (w instanceof Uint8Array ? Buffer.from(w).toString() : String(w)));
  const out: PolicyDefinition = { tiers: [] };
  let i = 0;
  const take = (n: number, what: string): string[] => {
    const got = ws.slice(i + 1, i + 1 + n);
    if (got.length < n) throw new RangeError(`${what} needs ${n} parameters`);
    i += 1 + n;
    return got;
  };
  while (i < ws.length) {
    const word = (ws[i] ?? "").toUpperCase();
    if (word === "TOKENBUCKET" || word === "LEAKYBUCKET") {
      const [c, r] = take(2, word) as [string, string];
      out.tiers.push(word === "TOKENBUCKET" ? new TokenBucket(Number(c), Number(r)) : new LeakyBucket(Number(c), Number(r)));
    } else if (word === "FIXEDWINDOW" || word === "SLIDINGLOG") {
      const [l, w] = take(2, word) as [string, string];
      out.tiers.push(word === "FIXEDWINDOW" ? new FixedWindow(Number(l), durationWord(w)) : new SlidingLog(Number(l), durationWord(w)));
    } else if (word === "SLIDINGCOUNTER") {
      const [l, w] = take(2, word) as [string, string];
      let precision: number | undefined;
      if ((ws[i] ?? "").toUpperCase() === "PRECISION" && i + 1 < ws.length) {
        precision = Number(ws[i + 1]);
        i += 2;
      }
      out.tiers.push(new SlidingCounter(Number(l), durationWord(w), precision === undefined ? {} : { precision }));
    } else if (word === "GCRA") {
      const [b, c, p] = take(3, word) as [string, string, string];
      out.tiers.push(new GCRA(Number(b), Number(c), durationWord(p)));
    } else if (word === "PENALTY" && i + 1 < ws.length) {
      out.penalty = durationWord(ws[i + 1] ?? "");
      i += 2;
    } else if (word === "SHADOW") {
      out.shadow = true;
      i += 1;
    } else if (word === "ON-CHANGE" && i + 1 < ws.length) {
      const how = (ws[i + 1] ?? "").toUpperCase();
      if (!(ON_CHANGE as readonly string[]).includes(how)) throw new RangeError(`ON-CHANGE ${how}: KEEP, SCALE or RESET`);
      out.onChange = how as "KEEP" | "SCALE" | "RESET";
      i += 2;
    } else {
      throw new RangeError(`cannot read ${JSON.stringify(ws[i])} in the policy definition ${JSON.stringify(ws.join(" "))}`);
    }
  }
  if (out.tiers.length === 0) throw new RangeError(`the policy definition ${JSON.stringify(ws.join(" "))} has no tier`);
  return out;
}

/** The words of a definition, for `RL.POLICY SET`. */
export function definitionWords(definition: PolicyDefinition): Arg[] {
  const words: Arg[] = definition.tiers.flatMap((t) => [t.word, ...t.spec.params]);
  if (definition.penalty !== undefined) {
    words.push("PENALTY", typeof definition.penalty === "number" ? `${definition.penalty}ms` : definition.penalty);
  }
  if (definition.shadow === true) words.push("SHADOW");
  if (definition.onChange !== undefined) words.push("ON-CHANGE", definition.onChange);
  return words;
}

type Fields = Record<string, unknown>;

/** One tier of the structured form: `{ algorithm: "tokenbucket", capacity: 10, rate: 1 }`. */
function structuredTier(tier: unknown, n: number): Limit {
  if (tier === null || typeof tier !== "object" || typeof (tier as Fields).algorithm !== "string") {
    throw new RangeError(`tier ${n} must be an object with an "algorithm"`);
  }
  const { algorithm, ...f } = tier as Fields;
  const allowed: Record<string, string[]> = {
    tokenbucket: ["capacity", "rate"],
    leakybucket: ["capacity", "rate"],
    fixedwindow: ["limit", "window"],
    slidinglog: ["limit", "window"],
    slidingcounter: ["limit", "window", "precision"],
    gcra: ["burst", "count", "period"],
  };
  const name = String(algorithm).toLowerCase();
  const fields = allowed[name];
  if (fields === undefined) throw new RangeError(`tier ${n}: unknown algorithm ${JSON.stringify(algorithm)} (one of ${Object.keys(allowed).join(", ")})`);
  const extra = Object.keys(f).filter((k) => !fields.includes(k));
  if (extra.length > 0) throw new RangeError(`tier ${n} (${name}): unknown field(s) ${extra.join(", ")}; it takes ${fields.join(", ")}`);
  for (const k of fields) {
    if (k !== "precision" && f[k] === undefined) throw new RangeError(`tier ${n} (${name}): ${k} is missing`);
  }
  // Durations in a file: numbers are seconds, as the server reads them (not
  // this client's milliseconds): a file is the server's words, structured.
  const d = (v: unknown): Duration => (typeof v === "number" ? `${v}s` : typeof v === "string" ? durationWord(v) : (v as string));
  try {
    switch (name) {
      case "tokenbucket":
        return new TokenBucket(f.capacity as number, f.rate as number);
      case "leakybucket":
        return new LeakyBucket(f.capacity as number, f.rate as number);
      case "fixedwindow":
        return new FixedWindow(f.limit as number, d(f.window));
      case "slidinglog":
        return new SlidingLog(f.limit as number, d(f.window));
      case "slidingcounter":
        return new SlidingCounter(f.limit as number, d(f.window), f.precision === undefined ? {} : { precision: f.precision as number });
      default:
        return new GCRA(f.burst as number, f.count as number, d(f.period));
    }
  } catch (error) {
    throw new RangeError(`tier ${n} (${name}): ${error instanceof Error ? error.message : String(error)}`);
  }
}

/**
 * The words for `RL.POLICY SET` from one of the forms a policy file takes:
 * the words as `RL.POLICY SET` takes them, as an array (`["TOKENBUCKET",
 * 10, 1]`) or a string (`"TOKENBUCKET 10 1 PENALTY 30s"`), sent as they are;
 * or the structured form `{ tiers: [{ algorithm: "tokenbucket", capacity:
 * 10, rate: 1 }], penalty: "30s", shadow: false, on_change: "keep" }` (a
 * number for a duration there is seconds, as the server reads it).
 */
export function policyWords(definition: unknown): Arg[] {
  if (typeof definition === "string") {
    const words = definition.split(/\s+/).filter((w) => w !== "");
    if (words.length === 0) throw new RangeError("the definition is empty");
    return words;
  }
  if (Array.isArray(definition)) {
    if (definition.length === 0) throw new RangeError("the definition is empty");
    for (const w of definition) {
      if (typeof w !== "string" && typeof w !== "number") throw new TypeError(`a definition's words are strings or numbers, not ${JSON.stringify(w)}`);
    }
    return definition as Arg[];
  }
  if (definition !== null && typeof definition === "object") {
    const form = definition as Fields;
    const extra = Object.keys(form).filter((k) => !["tiers", "penalty", "shadow", "on_change"].includes(k));
    if (extra.length > 0) throw new RangeError(`unknown field(s) ${extra.join(", ")}: a policy has tiers, penalty, shadow, on_change`);
    if (!Array.isArray(form.tiers) || form.tiers.length === 0) throw new RangeError('"tiers" must be a non-empty array of { algorithm, ... }');
    const out: PolicyDefinition = { tiers: (form.tiers as unknown[]).map(structuredTier) };
    if (form.shadow !== undefined && typeof form.shadow !== "boolean") throw new RangeError(`"shadow" must be true or false, not ${JSON.stringify(form.shadow)}`);
    out.shadow = form.shadow === true;
    if (form.on_change !== undefined) {
      const how = typeof form.on_change === "string" ? form.on_change.toUpperCase() : "";
      if (!(ON_CHANGE as readonly string[]).includes(how)) throw new RangeError(`"on_change" must be keep, scale or reset, not ${JSON.stringify(form.on_change)}`);
      out.onChange = how as "KEEP" | "SCALE" | "RESET";
    }
    if (form.penalty !== undefined) {
      if (typeof form.penalty !== "string" && typeof form.penalty !== "number") throw new RangeError(`"penalty" must be a duration ("30s"), not ${JSON.stringify(form.penalty)}`);
      out.penalty = typeof form.penalty === "number" ? `${form.penalty}s` : durationWord(form.penalty);
    }
    return definitionWords(out);
  }
  throw new TypeError(`a definition is an array of words, a string, or { tiers, ... }; not ${JSON.stringify(definition)}`);
}

/** `RL.POLICY GET`'s answer. */
export interface PolicyInfo {
  name: string;
  version: number;
  /** The words after the name, as the module normalised them. */
  words: string[];
}

const text = (v: unknown): string => (v instanceof Uint8Array ? Buffer.from(v).toString() : String(v));

function parseGet(reply: unknown): PolicyInfo | null {
  if (reply === null || reply === undefined) return null;
  const r = reply as unknown[];
  return { name: text(r[0]), version: Number(r[1]), words: (r[2] as unknown[]).map(text) };
}

/** `RL.POLICY GET name`: null when there is none. */
export function policyGet(name: string): Command<PolicyInfo | null> {
  return { name: "RL.POLICY", args: ["GET", checkPolicyName(name)], keys: [], parse: parseGet };
}

/** The definitions read from Redis, each used for `maxAgeMs`; a missing one is asked again each time. */
export class PolicyBook {
  private readonly known = new Map<string, { definition: PolicyDefinition | null; at: number }>();
  constructor(readonly maxAgeMs = POLICY_MAX_AGE_MS) {}

  stale(name: string): boolean {
    const k = this.known.get(name);
    return k === undefined || k.definition === null || performance.now() - k.at >= this.maxAgeMs;
  }

  get(name: string): PolicyDefinition | null {
    return this.known.get(name)?.definition ?? null;
  }

  put(name: string, info: PolicyInfo | null): void {
    let definition: PolicyDefinition | null = null;
    try {
      definition = info === null ? null : parseDefinition(info.words);
    } catch {
      definition = null; // words this client cannot read: no headers' window, the check still runs
    }
    this.known.set(name, { definition, at: performance.now() });
  }

  forget(name?: string): void {
    if (name === undefined) this.known.clear();
    else this.known.delete(name);
  }
}

/** Each tier's `RateLimit-Policy` item: the inline limit's, named after the policy (`plan:pro`; `plan:pro:0`... for several tiers). */
export function headerPolicies(name: string, definition: PolicyDefinition | null): Array<Policy | undefined> {
  if (definition === null) return [undefined];
  const one = definition.tiers.length === 1;
  return definition.tiers.map((t, i) => {
    const p = t.spec.policy;
    return new Policy(one ? name : `${name}:${i}`, p.quota, p.windowMs, p.unit, p.unitMs);
  });
}

/**
 * `RL.CHECK name key... [options]`: the keys from `key` (`policyKeys`) by
 * the tiers of the definition in `book`, the reply read as the inline
 * command's. A reply whose limits differ from the definition's has it read
 * again before the next check.
 */
export function policyCheckWords(
  key: string,
  name: string,
  book: PolicyBook,
  words: readonly Arg[],
  block?: number,
  label?: string,
): Command<Decision> {
  if (typeof key !== "string" || key.length === 0) {
    throw new TypeError(`a key must be a non-empty string, not ${JSON.stringify(key)}`);
  }
  const definition = book.get(name);
  const keys = policyKeys(key, definition === null ? 1 : definition.tiers.length);
  const policies = headerPolicies(label ?? name, definition);
  const expected = definition?.tiers.map((t) => t.quota);
  return {
    name: "RL.CHECK",
    args: [name, ...keys, ...words],
    keys,
    parse: (reply) => {
      const r = reply as unknown[];
      let decision: Decision;
      let limits: number[];
      if (r.length > 5 && Array.isArray(r[5])) {
        const parts = (r[5] as unknown[]).map((t, i) => decisionFrom(t, policies[i]));
        decision = decisionFrom(r.slice(0, 5)).with({ delayMs: Math.max(0, ...parts.map((d) => d.delayMs)), tiers: parts });
        limits = parts.map((d) => d.limit);
      } else {
        decision = decisionFrom(r, policies[0]);
        limits = [decision.limit];
      }
      if (expected !== undefined && JSON.stringify(limits) !== JSON.stringify(expected)) book.forget(name);
      return decision;
    },
    blockMs: block,
  };
}

/** `policyCheckWords` with the options spelled. */
export function policyCheck(key: string, name: string, book: PolicyBook, options: CheckOptions = {}): Command<Decision> {
  return policyCheckWords(key, name, book, optionWords(options), blockMs(options.block));
}

// Syncing a set of policies ------------------------------------------------------

/** What `syncPolicies` did (or would do) to one policy on one primary. */
export interface PolicyChange {
  name: string;
  node: string;
  status: "created" | "changed" | "unchanged" | "deleted";
  oldVersion: number | null;
  newVersion: number | null;
}

export interface SyncReport {
  dryRun: boolean;
  changes: PolicyChange[];
  /** Every definition refused: by the client (node `"client"`) or by a primary. */
  errors: Array<{ name: string; node: string; message: string }>;
  /** Each primary's `RL.POLICY DIGEST` after the sync. */
  digests: Record<string, string>;
}

/** `syncPolicies` applied nothing (`report.errors`), or the primaries disagree after it (`report.digests`). */
export class PolicySyncError extends Error {
  constructor(
    message: string,
    readonly report: SyncReport,
  ) {
    super(message);
    this.name = "PolicySyncError";
  }
}

/** The policies of a JSON file, or of an object: `{ name: definition }`. */
export async function loadPolicies(source: string | Record<string, unknown>): Promise<Record<string, unknown>> {
  const data: unknown = typeof source === "string" ? JSON.parse(await readFile(source, "utf8")) : source;
  if (data === null || typeof data !== "object" || Array.isArray(data)) throw new TypeError("policies must be an object of name -> definition");
  return data as Record<string, unknown>;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message.replace(/^ERR /, "") : String(error);
}

/**
 * Makes the policies in Redis those of `policies` (an object, or a JSON
 * file's path), on every primary of a cluster (`redis`: a client, a
 * `RateLimiter`, or an array of them: servers that each need the policies). First every definition is
 * validated on every primary (`RL.POLICY SET ... DRYRUN`): if any is
 * refused, none is applied and `PolicySyncError` lists every error. Then
 * each is applied; the report says, per policy and primary, created,
 * changed (old -> new version) or unchanged. `prune` deletes the policies
 * the source does not name; `dryRun` changes nothing. Last, each primary's
 * `RL.POLICY DIGEST` is read: if they differ, `PolicySyncError`.
 */
export async function syncPolicies(
  redis: RedisLike | readonly RedisLike[],
  policies: string | Record<string, unknown>,
  options: { dryRun?: boolean; prune?: boolean } = {},
): Promise<SyncReport> {
  const adapters = (Array.isArray(redis) ? (redis as RedisLike[]) : [redis]).map((r) => {
    const inner = (r as { adapter?: RedisAdapter }).adapter; // a RateLimiter
    return inner !== undefined && typeof inner.send === "function" ? inner : adapt(r);
  });
  const dryRun = options.dryRun === true;
  const report: SyncReport = { dryRun, changes: [], errors: [], digests: {} };
  const data = await loadPolicies(policies);
  const words = new Map<string, Arg[]>();
  for (const [name, definition] of Object.entries(data)) {
    try {
      checkPolicyName(name);
      words.set(name, policyWords(definition));
    } catch (error) {
      report.errors.push({ name, node: "client", message: message(error) });
    }
  }
  const nodes: PrimaryNode[] = [];
  for (const [i, adapter] of adapters.entries()) {
    if (adapter.primaries !== undefined) nodes.push(...(await adapter.primaries()));
    else nodes.push({ name: `server ${i}`, send: (args) => adapter.send(args, undefined) });
  }
  const current = new Map<string, Map<string, number>>();
  const would = new Map<string, number>();
  for (const node of nodes) {
    const listed = (await node.send(["RL.POLICY", "LIST"])) as unknown[];
    current.set(node.name, new Map(listed.map((pair) => [text((pair as unknown[])[0]), Number((pair as unknown[])[1])])));
    for (const [name, ws] of words) {
      try {
        would.set(`${node.name}\n${name}`, Number(await node.send(["RL.POLICY", "SET", name, ...ws, "DRYRUN"])));
      } catch (error) {
        if (!isErrorReply(error)) throw error;
        report.errors.push({ name, node: node.name, message: message(error) });
      }
    }
  }
  if (report.errors.length > 0) {
    throw new PolicySyncError(`no policy applied: ${report.errors.map((e) => `${e.name} (${e.node}): ${e.message}`).join("; ")}`, report);
  }
  for (const node of nodes) {
    const old = current.get(node.name) ?? new Map<string, number>();
    for (const [name, ws] of words) {
      const before = old.get(name) ?? null;
      const after = dryRun ? (would.get(`${node.name}\n${name}`) ?? null) : Number(await node.send(["RL.POLICY", "SET", name, ...ws]));
      const status = before === null ? "created" : after === before ? "unchanged" : "changed";
      report.changes.push({ name, node: node.name, status, oldVersion: before, newVersion: after });
    }
    if (options.prune === true) {
      for (const [name, version] of [...old].sort(([a], [b]) => (a < b ? -1 : 1))) {
        if (words.has(name)) continue;
        if (!dryRun) await node.send(["RL.POLICY", "DEL", name]);
        report.changes.push({ name, node: node.name, status: "deleted", oldVersion: version, newVersion: null });
      }
    }
  }
  for (const node of nodes) report.digests[node.name] = text(await node.send(["RL.POLICY", "DIGEST"]));
  if (!dryRun && new Set(Object.values(report.digests)).size > 1) {
    throw new PolicySyncError(
      `the primaries hold different policies after the sync: digests ${Object.entries(report.digests)
        .map(([n, d]) => `${n}=${d}`)
        .join(", ")}`,
      report,
    );
  }
  return report;
}
