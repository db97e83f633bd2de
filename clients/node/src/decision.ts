/**
 * What a check decided, and the HTTP fields that tell a client about it.
 *
 * Every check replies the same five integers (allowed, limit, remaining,
 * retry_after_ms, reset_after_ms), so one `Decision` serves every algorithm,
 * `RL.ALL` and `RL.ACQUIRE`, and its headers are written once.
 */
import { ceilSeconds } from "./units.js";

/** Header fields by name, ready for any framework's response. */
export type Headers = Record<string, string>;

/** The largest integer a structured field carries (RFC 9651: at most 15 digits). */
export const SF_INTEGER_MAX = 999_999_999_999_999;

function sfInteger(value: number): number {
  return Math.min(Math.max(0, Math.round(value)), SF_INTEGER_MAX);
}

/** A structured-field string (RFC 9651 section 3.3.3). */
export function sfString(text: string): string {
  return `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

/**
 * A quota policy, as the IETF `RateLimit-Policy` field describes one
 * (draft-ietf-httpapi-ratelimit-headers-11): `quota` units per `windowMs`,
 * under a `name` the `RateLimit` field refers back to.
 */
export class Policy {
  constructor(
    readonly name: string,
    readonly quota: number,
    /** The span the quota is for; undefined leaves `w` out (a concurrency limit has none). */
    readonly windowMs?: number,
    /** The draft's quota unit (`qu`); undefined: requests. */
    readonly unit?: string,
    /** For limits that refill continuously: ms for one unit to come back (see `Decision.nextUnitMs`). */
    readonly unitMs?: number,
  ) {
    if (name.length === 0 || !/^[\x20-\x7e]+$/.test(name)) {
      throw new RangeError(
        `policy name ${JSON.stringify(name)} must be non-empty printable ASCII (it is sent as a structured-field string)`,
      );
    }
  }

  /** This policy as an item of `RateLimit-Policy`. */
  item(name = this.name): string {
    let text = `${sfString(name)};q=${sfInteger(this.quota)}`;
    if (this.unit !== undefined) text += `;qu=${sfString(this.unit)}`;
    if (this.windowMs !== undefined) text += `;w=${sfInteger(Math.max(1, ceilSeconds(this.windowMs)))}`;
    return text;
  }
}

export interface DecisionFields {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** 0 when allowed; null when the request can never pass (its cost is above the limit). */
  retryAfterMs: number | null;
  resetAfterMs: number;
  delayMs?: number;
  policy?: Policy | undefined;
  tiers?: readonly Decision[];
}

export interface HeaderOptions {
  /** `X-RateLimit-Limit`, `-Remaining`, `-Reset` (default true). */
  legacy?: boolean;
  /** `RateLimit-Policy` and `RateLimit` (default true). */
  ietf?: boolean;
}

/**
 * The answer to one check.
 *
 * `retryAfterMs` is 0 when allowed, else how long until this same request
 * would be allowed, or null when it never can be. `resetAfterMs` is how long
 * until the key is back to its fresh state. `delayMs` is how long to wait
 * before acting so the output is smooth (the leaky bucket's; 0 otherwise).
 * For `RL.ALL`, the fields are the combined answer and `tiers` holds each
 * tier's own, in key order.
 */
export class Decision {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly retryAfterMs: number | null;
  readonly resetAfterMs: number;
  readonly delayMs: number;
  readonly policy: Policy | undefined;
  readonly tiers: readonly Decision[];

  constructor(fields: DecisionFields) {
    this.allowed = fields.allowed;
    this.limit = fields.limit;
    this.remaining = fields.remaining;
    this.retryAfterMs = fields.retryAfterMs;
    this.resetAfterMs = fields.resetAfterMs;
    this.delayMs = fields.delayMs ?? 0;
    this.policy = fields.policy;
    this.tiers = fields.tiers ?? [];
  }

  /**
   * True when a `shadow` check would have been denied: allowed, with a wait
   * (or null: it could never pass). Always false without `shadow`.
   */
  get shadowDenied(): boolean {
    return this.allowed && this.retryAfterMs !== 0;
  }

  /**
   * The limit the `X-RateLimit-*` fields and `Retry-After` speak for: the
   * tier that denied (the one that makes the request wait longest), else
   * the tier with the least remaining (ties: the soonest reset). A decision
   * without tiers is its own binding limit.
   */
  get binding(): Decision {
    if (this.tiers.length === 0) return this;
    const wait = (d: Decision): number => (d.retryAfterMs === null ? Infinity : d.retryAfterMs);
    const denied = this.tiers.filter((d) => !d.allowed);
    if (denied.length > 0) {
      return denied.reduce((a, b) => (wait(b) > wait(a) ? b : a));
    }
    return this.tiers.reduce((a, b) =>
      b.remaining < a.remaining || (b.remaining === a.remaining && b.resetAfterMs < a.resetAfterMs) ? b : a,
    );
  }

  /**
   * Milliseconds until more quota is available (the draft's `t`): a
   * function of the key's state alone, so the same state gives the same
   * value whether this request was allowed or denied.
   * - Token bucket, leaky bucket, GCRA: until the next unit comes back
   *   (0 when full).
   * - Fixed window: until the window ends. Sliding counter, sliding log,
   *   concurrency: until the key is fresh (for the sliding ones an upper
   *   bound: room may come back earlier, as `Retry-After` then says).
   * A denial with nothing remaining that waits longer (a `PENALTY`, or a
   * cost above 1) states that wait instead, so `t` never points before
   * `Retry-After`.
   */
  get nextUnitMs(): number {
    const unit = this.policy?.unitMs;
    let t = this.resetAfterMs;
    if (unit !== undefined) {
      t = this.remaining >= this.limit ? 0 : Math.max(0, this.resetAfterMs - (this.limit - this.remaining - 1) * unit);
      t = Math.min(t, this.resetAfterMs);
    }
    if (!this.allowed && this.remaining === 0 && this.retryAfterMs !== null) {
      t = Math.max(t, this.retryAfterMs);
    }
    return t;
  }

  /** `Retry-After` in seconds, or undefined when not to be sent (allowed, or never passes). */
  retryAfterSeconds(): number | undefined {
    const binding = this.binding;
    if (this.allowed || binding.retryAfterMs === null || this.retryAfterMs === null) return undefined;
    return Math.max(1, ceilSeconds(Math.max(binding.retryAfterMs, this.retryAfterMs)));
  }

  /**
   * The response header fields for this decision.
   *
   * `legacy`: `X-RateLimit-Limit`, `-Remaining`, `-Reset`, all three from
   * the binding limit (`Reset`: seconds until it has more quota, rounded
   * up; a delay, not a Unix time). `ietf`: `RateLimit-Policy` and
   * `RateLimit`, one item per tier. `Retry-After` (seconds, rounded up)
   * comes with either when the request is denied, and never when it can
   * never pass. Every integer of the IETF fields is clamped to 15 digits,
   * so they always parse as structured fields.
   */
  headers(options: HeaderOptions = {}): Headers {
    const headers: Headers = {};
    if (options.legacy ?? true) {
      const b = this.binding;
      headers["X-RateLimit-Limit"] = String(b.limit);
      headers["X-RateLimit-Remaining"] = String(b.remaining);
      headers["X-RateLimit-Reset"] = String(ceilSeconds(b.nextUnitMs));
    }
    if (options.ietf ?? true) Object.assign(headers, this.ietfFields());
    const retry = this.retryAfterSeconds();
    if (retry !== undefined) headers["Retry-After"] = String(retry);
    return headers;
  }

  private ietfFields(): Headers {
    const tiers = (this.tiers.length > 0 ? this.tiers : [this]).filter((d) => d.policy !== undefined);
    if (tiers.length === 0) return {};
    const seen = new Map<string, number>();
    const policies: string[] = [];
    const limits: string[] = [];
    for (const d of tiers) {
      const policy = d.policy as Policy;
      // Two tiers of one name (two unnamed limits of one algorithm) are told apart: name, name-2, ...
      const n = (seen.get(policy.name) ?? 0) + 1;
      seen.set(policy.name, n);
      const name = n === 1 ? policy.name : `${policy.name}-${n}`;
      policies.push(policy.item(name));
      limits.push(`${sfString(name)};r=${sfInteger(d.remaining)};t=${sfInteger(ceilSeconds(d.nextUnitMs))}`);
    }
    return { "RateLimit-Policy": policies.join(", "), RateLimit: limits.join(", ") };
  }

  /** This decision with other fields (for the local denial cache). */
  with(fields: Partial<DecisionFields>): Decision {
    return new Decision({ ...this.fields(), ...fields });
  }

  private fields(): DecisionFields {
    return {
      allowed: this.allowed,
      limit: this.limit,
      remaining: this.remaining,
      retryAfterMs: this.retryAfterMs,
      resetAfterMs: this.resetAfterMs,
      delayMs: this.delayMs,
      policy: this.policy,
      tiers: this.tiers,
    };
  }
}

/** The answer to `RL.ACQUIRE`: a Decision whose `id` names the slot taken (null when none was). */
export class Lease extends Decision {
  readonly id: string | null;
  constructor(fields: DecisionFields, id: string | null) {
    super(fields);
    this.id = id;
  }
}
