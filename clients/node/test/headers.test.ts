/** Decision.headers(): the binding limit, `t` for a state, structured fields that always parse. */
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import { parseList } from "structured-headers";
import {
  Decision,
  FixedWindow,
  GCRA,
  LeakyBucket,
  type Limit,
  Policy,
  RateLimiter,
  SF_INTEGER_MAX,
  SlidingCounter,
  SlidingLog,
  TokenBucket,
} from "../src/index.js";
import { type Connected, connect } from "./clients.js";
import { Server } from "./servers.js";

/** The `RateLimit` field's items as { name: { r, t } }. */
function rateLimitItems(field: string | undefined): Record<string, { r: number; t: number }> {
  assert.ok(field !== undefined);
  const out: Record<string, { r: number; t: number }> = {};
  for (const [name, params] of parseList(field)) {
    out[String(name)] = { r: params.get("r") as number, t: params.get("t") as number };
  }
  return out;
}

function assertParses(headers: Record<string, string>): void {
  for (const name of ["RateLimit", "RateLimit-Policy"]) {
    const value = headers[name];
    if (value === undefined) continue;
    assert.doesNotThrow(() => parseList(value), `${name}: ${value}`);
    for (const [, params] of parseList(value)) {
      for (const v of params.values()) {
        if (typeof v === "number") assert.ok(Number.isInteger(v) && v >= 0 && v <= SF_INTEGER_MAX, `${name}: ${value}`);
      }
    }
  }
}

describe("headers without a server", () => {
  const tier = (name: string, remaining: number, resetAfterMs: number, allowed = true, retryAfterMs: number | null = 0) =>
    new Decision({
      allowed,
      limit: 10,
      remaining,
      retryAfterMs,
      resetAfterMs,
      policy: new Policy(name, 10, 60_000),
    });

  it("binding: the least remaining, ties to the soonest reset", () => {
    const d = new Decision({
      allowed: true,
      limit: 10,
      remaining: 3,
      retryAfterMs: 0,
      resetAfterMs: 50_000,
      tiers: [tier("a", 5, 1000), tier("b", 3, 50_000), tier("c", 3, 20_000)],
    });
    assert.equal(d.binding.policy?.name, "c");
    const h = d.headers();
    assert.deepEqual([h["X-RateLimit-Remaining"], h["X-RateLimit-Reset"]], ["3", "20"]);
    assert.equal(h["Retry-After"], undefined);
  });

  it("binding: the tier that denied, the one that waits longest; Retry-After agrees", () => {
    const d = new Decision({
      allowed: false,
      limit: 10,
      remaining: 0,
      retryAfterMs: 30_000,
      resetAfterMs: 60_000,
      tiers: [tier("a", 0, 60_000, true), tier("b", 0, 2000, false, 1500), tier("c", 0, 30_000, false, 30_000)],
    });
    assert.equal(d.binding.policy?.name, "c");
    const h = d.headers();
    assert.deepEqual([h["X-RateLimit-Remaining"], h["X-RateLimit-Reset"], h["Retry-After"]], ["0", "30", "30"]);
  });

  it("integers past 15 digits are clamped, so every field parses", () => {
    const huge = 2 ** 53 - 1;
    const d = new Decision({
      allowed: true,
      limit: huge,
      remaining: huge - 1,
      retryAfterMs: 0,
      resetAfterMs: 31_622_400_000,
      policy: new TokenBucket(huge, 0.001).policy(),
    });
    const h = d.headers();
    assertParses(h);
    assert.match(h["RateLimit-Policy"]!, /q=999999999999999;w=999999999999999/);
    assert.match(h.RateLimit!, /r=999999999999999/);
    assert.equal(h["X-RateLimit-Limit"], String(huge));
  });

  it("two tiers of one name are told apart, names are escaped", () => {
    const d = new Decision({
      allowed: true,
      limit: 10,
      remaining: 1,
      retryAfterMs: 0,
      resetAfterMs: 1,
      tiers: [tier('x"y', 1, 1), tier('x"y', 2, 1)],
    });
    const h = d.headers();
    assertParses(h);
    assert.deepEqual(Object.keys(rateLimitItems(h.RateLimit)), ['x"y', 'x"y-2']);
  });

  it("legacy and ietf sets can be turned off", () => {
    const d = tier("a", 1, 1000);
    assert.deepEqual(Object.keys(d.headers({ legacy: false })), ["RateLimit-Policy", "RateLimit"]);
    assert.deepEqual(Object.keys(d.headers({ ietf: false })), ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"]);
  });
});

describe("headers from a server", () => {
  let server: Server;
  let conn: Connected;
  let limiter: RateLimiter;
  before(async () => {
    server = await Server.start();
    conn = await connect("ioredis", server.port);
    limiter = new RateLimiter(conn.client);
  });
  after(async () => {
    await conn.close();
    server.stop();
  });
  beforeEach(async () => {
    await conn.raw("FLUSHALL");
  });

  it("the README's case: X-RateLimit-* from the token bucket that denied, Reset = Retry-After", async () => {
    const tiers = [
      ["{ip}:tb", new TokenBucket(10, 1)],
      ["{ip}:m", new SlidingCounter(100, "1m", { name: "per-minute" })],
    ] as const;
    for (let i = 0; i < 10; i++) assert.equal((await limiter.checkAll(tiers)).allowed, true);
    const h = (await limiter.checkAll(tiers)).headers();
    assert.equal(h["X-RateLimit-Limit"], "10");
    assert.equal(h["X-RateLimit-Remaining"], "0");
    assert.equal(h["X-RateLimit-Reset"], "1");
    assert.equal(h["Retry-After"], "1");
    assertParses(h);
    assert.deepEqual(rateLimitItems(h.RateLimit).tokenbucket, { r: 0, t: 1 });
  });

  const cases: Array<[string, Limit]> = [
    ["tokenbucket", new TokenBucket(3, 0.5)],
    ["leakybucket", new LeakyBucket(3, 0.5)],
    ["gcra", new GCRA(2, 1, "2s")],
    ["fixedwindow", new FixedWindow(3, "1h")],
    ["slidinglog", new SlidingLog(3, "10s")],
    ["slidingcounter", new SlidingCounter(3, "10s", { precision: 10 })],
  ];
  for (const [name, limit] of cases) {
    it(`${name}: the last allowed and the first denied state the same t`, async () => {
      let last: Decision | undefined;
      for (let i = 0; i < 3; i++) last = await limiter.check(name, limit);
      assert.equal(last?.allowed, true);
      const denied = await limiter.check(name, limit);
      assert.equal(denied.allowed, false);
      const a = rateLimitItems(last.headers().RateLimit)[name]!;
      const b = rateLimitItems(denied.headers().RateLimit)[name]!;
      assert.equal(a.r, 0);
      assert.equal(b.r, 0);
      // the same state, a few ms apart: the same whole seconds (or one less at a boundary)
      assert.ok(b.t === a.t || b.t === a.t - 1, `allowed t=${a.t}, denied t=${b.t}`);
      assert.ok(Number(denied.headers()["Retry-After"]) <= b.t + 1);
      assertParses(last.headers());
      assertParses(denied.headers());
    });
  }
});
