/** Every command and option, through each adapter, against a real server. */
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import {
  FixedWindow,
  GCRA,
  InvalidArgumentError,
  ModuleNotLoadedError,
  RateLimitExceeded,
  RateLimiter,
  SlidingCounter,
  TokenBucket,
  WaitInterruptedError,
  WrongTypeError,
} from "../src/index.js";
import { type Connected, KINDS, connect } from "./clients.js";
import { Server, rawCommand, sleep } from "./servers.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

for (const kind of KINDS) {
  describe(`RateLimiter over ${kind}`, () => {
    let conn: Connected;
    let limiter: RateLimiter;
    before(async () => {
      conn = await connect(kind, server.port);
      limiter = new RateLimiter(conn.client);
    });
    after(() => conn.close());
    beforeEach(async () => {
      await conn.raw("FLUSHALL");
    });

    it("picks the adapter of the client", () => {
      assert.equal(limiter.adapter.kind, kind === "ioredis" ? "ioredis" : "node-redis");
    });

    it("token bucket: allows the capacity, then denies with a wait", async () => {
      const seen = [];
      for (let i = 0; i < 4; i++) seen.push(await limiter.tokenBucket("tb", 3, 1));
      assert.deepEqual(
        seen.map((d) => [d.allowed, d.limit, d.remaining]),
        [
          [true, 3, 2],
          [true, 3, 1],
          [true, 3, 0],
          [false, 3, 0],
        ],
      );
      const denied = seen[3]!;
      assert.ok(denied.retryAfterMs! > 900 && denied.retryAfterMs! <= 1000, String(denied.retryAfterMs));
      assert.equal(denied.headers()["Retry-After"], "1");
      assert.equal(seen[0]!.retryAfterMs, 0);
    });

    it("every algorithm answers a Decision with its limit", async () => {
      const sc = await limiter.slidingCounter("sc", 5, "1m", { precision: 10 });
      const fw = await limiter.fixedWindow("fw", 5, 60_000);
      const sl = await limiter.slidingLog("sl", 5, "1m");
      const lb = await limiter.leakyBucket("lb", 5, 1);
      const lb2 = await limiter.leakyBucket("lb", 5, 1);
      const gc = await limiter.gcra("gc", 4, 1, "1s");
      for (const d of [sc, fw, sl, lb, gc]) assert.equal(d.allowed, true);
      assert.deepEqual([sc.limit, fw.limit, sl.limit, lb.limit, gc.limit], [5, 5, 5, 5, 5]);
      assert.deepEqual([sc.remaining, fw.remaining, sl.remaining, gc.remaining], [4, 4, 4, 4]);
      assert.ok(lb2.delayMs > 0 && lb2.delayMs <= 1000, `leaky bucket delay ${lb2.delayMs}`);
      const info = await limiter.info("sc");
      assert.equal(info?.fields.precision, 10);
    });

    it("CL.THROTTLE answers like redis-cell, read into a Decision", async () => {
      const first = await limiter.clThrottle("cell", 1, 1, 60);
      const second = await limiter.clThrottle("cell", 1, 1, 60);
      const third = await limiter.clThrottle("cell", 1, 1, 60);
      assert.deepEqual([first.allowed, first.limit, first.remaining], [true, 2, 1]);
      assert.equal(second.allowed, true);
      assert.equal(third.allowed, false);
      assert.ok(third.retryAfterMs! >= 1000 && third.retryAfterMs! % 1000 === 0);
      const peek = await limiter.clThrottle("cell", 1, 1, 60, 0);
      assert.equal(peek.remaining, 0);
    });

    it("cost, peek and RL.PEEK change what they should", async () => {
      const d = await limiter.tokenBucket("c", 10, 1, { cost: 4 });
      assert.equal(d.remaining, 6);
      const p = await limiter.tokenBucket("c", 10, 1, { cost: 7, peek: true });
      assert.deepEqual([p.allowed, p.remaining], [false, 6]);
      const q = await limiter.peek("c", new TokenBucket(10, 1), { cost: 6 });
      assert.deepEqual([q.allowed, q.remaining], [true, 6]);
      assert.equal((await limiter.info("c"))?.remaining, 6);
      await limiter.peek("untouched", new TokenBucket(10, 1));
      assert.equal(await limiter.info("untouched"), null);
      const never = await limiter.tokenBucket("c", 10, 1, { cost: 11 });
      assert.equal(never.retryAfterMs, null);
      assert.equal(never.headers()["Retry-After"], undefined);
    });

    it("penalty locks a key out and RL.INFO says until when", async () => {
      await limiter.fixedWindow("p", 1, "1m", { penalty: "1h" });
      const denied = await limiter.fixedWindow("p", 1, "1m", { penalty: "1h" });
      assert.equal(denied.allowed, false);
      assert.ok(denied.retryAfterMs! > 3_500_000);
      const info = await limiter.info("p");
      assert.ok(info?.penaltyUntil instanceof Date);
      assert.ok(info.penaltyUntil.getTime() > Date.now() + 3_500_000);
    });

    it("shadow never denies and says what it would have done", async () => {
      await limiter.tokenBucket("s", 1, 1, { shadow: true });
      const would = await limiter.tokenBucket("s", 1, 1, { shadow: true });
      assert.equal(would.allowed, true);
      assert.equal(would.shadowDenied, true);
      const plain = await limiter.tokenBucket("s2", 1, 1);
      assert.equal(plain.shadowDenied, false);
    });

    it("block waits on the server for the next token", async () => {
      await limiter.tokenBucket("b", 1, 10);
      const start = performance.now();
      const d = await limiter.tokenBucket("b", 1, 10, { block: 1000 });
      const waited = performance.now() - start;
      assert.equal(d.allowed, true);
      assert.ok(waited > 50 && waited < 900, `waited ${waited} ms`);
      assert.throws(() => limiter.tokenBucket("b", 1, 10, { block: 0 }), /ambiguous/);
    });

    it("contradicting options are the server's to refuse", async () => {
      await assert.rejects(limiter.tokenBucket("x", 1, 1, { peek: true, block: 100 }), (e: unknown) => {
        assert.ok(e instanceof InvalidArgumentError);
        assert.match(e.message, /^RL\.TOKENBUCKET: .*syntax error/);
        return true;
      });
    });

    it("a key of another type is a WrongTypeError", async () => {
      await conn.raw("SET", "str", "x");
      await assert.rejects(limiter.tokenBucket("str", 1, 1), WrongTypeError);
    });

    it("values are checked when a limit is built", () => {
      assert.throws(() => new FixedWindow(5, "1 minute"), /not a duration/);
      assert.throws(() => new TokenBucket(0, 1), /capacity/);
      assert.throws(() => new TokenBucket(1, Number.NaN), /rate/);
      assert.throws(() => new FixedWindow(5, "367d"), /366 days/);
      assert.throws(() => new GCRA(1, 1, "1s", { name: "bad\nname" }), /printable ASCII/);
    });

    it("RL.ALL takes from every tier or none", async () => {
      const tiers = [
        ["{u}:s", new TokenBucket(2, 1, { name: "burst" })],
        ["{u}:m", new SlidingCounter(3, "1m", { name: "minute" })],
      ] as const;
      const a = await limiter.checkAll(tiers);
      assert.equal(a.allowed, true);
      assert.deepEqual(
        a.tiers.map((t) => [t.policy?.name, t.remaining]),
        [
          ["burst", 1],
          ["minute", 2],
        ],
      );
      await limiter.checkAll(tiers);
      const denied = await limiter.checkAll(tiers);
      assert.equal(denied.allowed, false);
      assert.equal(denied.binding.policy?.name, "burst");
      // the minute tier gave nothing to the denied request
      assert.equal((await limiter.info("{u}:m"))?.remaining, 1);
      const byObject = await limiter.checkAll({ "{v}:a": new FixedWindow(1, "1m") }, { peek: true });
      assert.equal(byObject.allowed, true);
    });

    it("leases: acquire, release, and hold that releases however it ends", async () => {
      const a = await limiter.acquire("jobs", 2, "30s");
      assert.equal(a.allowed, true);
      assert.equal(typeof a.id, "string");
      const b = await limiter.acquire("jobs", 2, "30s", { id: "mine" });
      assert.equal(b.id, "mine");
      const c = await limiter.acquire("jobs", 2, "30s");
      assert.deepEqual([c.allowed, c.id], [false, null]);
      const h = c.headers();
      assert.equal(h["RateLimit-Policy"], '"concurrency";q=2;qu="concurrent-requests"');
      assert.match(h.RateLimit!, /^"concurrency";r=0;t=30$/);
      assert.equal(h["Retry-After"], "30");
      assert.equal(await limiter.release("jobs", "mine"), true);
      assert.equal(await limiter.release("jobs", "mine"), false);
      await assert.rejects(
        limiter.hold("jobs", 2, "30s", () => {
          throw new Error("job failed");
        }),
        /job failed/,
      );
      const result = await limiter.hold("jobs", 2, "30s", async (lease) => {
        assert.equal((await limiter.acquire("jobs", 2, "30s")).allowed, false);
        return lease.remaining;
      });
      assert.equal(result, 0);
      assert.equal((await limiter.info("jobs"))?.remaining, 1);
      await limiter.acquire("jobs", 2, "30s");
      await assert.rejects(
        limiter.hold("jobs", 2, "30s", () => "never runs"),
        (e: unknown) => e instanceof RateLimitExceeded && e.decision.allowed === false,
      );
    });

    it("acquire with block waits for a slot to come back", async () => {
      const first = await limiter.acquire("slot", 1, "200ms");
      assert.equal(first.allowed, true);
      const second = await limiter.acquire("slot", 1, "200ms", { block: 2000 });
      assert.equal(second.allowed, true);
    });

    it("RL.TOP lists the keys denied most, and RESET forgets them", async () => {
      await limiter.topReset();
      for (let i = 0; i < 3; i++) await limiter.fixedWindow("hot", 1, "1m");
      await limiter.fixedWindow("warm", 1, "1m");
      await limiter.fixedWindow("warm", 1, "1m");
      const top = await limiter.top(5, { withError: true });
      assert.deepEqual(
        top.map((e) => [e.key, e.count]),
        [
          ["hot", 2],
          ["warm", 1],
        ],
      );
      assert.equal(top[0]!.error, 0);
      await limiter.topReset();
      assert.deepEqual(await limiter.top(), []);
    });

    it("RL.INFO reads a key's fields as numbers", async () => {
      await limiter.tokenBucket("i", 10, 2.5);
      const info = await limiter.info("i");
      assert.equal(info?.algorithm, "tokenbucket");
      assert.equal(info.fields.rate_per_s, 2.5);
      assert.equal(info.remaining, 9);
      assert.ok(info.ttlMs > 0 && info.ttlMs <= 4000);
      assert.equal(info.penaltyUntil, null);
    });
  });
}

describe("BLOCK and the client's command timeout", () => {
  it("refuses a block the client would not wait for (ioredis commandTimeout, node-redis socketTimeout)", async () => {
    for (const kind of ["ioredis", "node-redis"] as const) {
      const conn = await connect(kind, server.port, { timeoutMs: 500 });
      try {
        const limiter = new RateLimiter(conn.client);
        assert.equal(limiter.adapter.commandTimeoutMs(), 500);
        await assert.rejects(limiter.tokenBucket("t", 1, 1, { block: 1000 }), /command timeout is 500 ms/);
        await assert.rejects(limiter.acquire("t2", 1, "1s", { block: Infinity }), /no limit/);
        assert.equal((await limiter.tokenBucket(`t3-${kind}`, 1, 1, { block: 100 })).allowed, true);
      } finally {
        await conn.close();
      }
    }
  });
});

describe("RESP3 (node-redis RESP: 3)", () => {
  it("reads RL.INFO's map and doubles the same way", async () => {
    const conn = await connect("node-redis", server.port, { resp3: true });
    try {
      const limiter = new RateLimiter(conn.client);
      await limiter.tokenBucket("r3", 10, 2.5);
      const info = await limiter.info("r3");
      assert.equal(info?.algorithm, "tokenbucket");
      assert.equal(info.fields.rate_per_s, 2.5);
      assert.equal((await limiter.checkAll([["{r}:a", new TokenBucket(1, 1)]])).tiers.length, 1);
    } finally {
      await conn.close();
    }
  });
});

describe("a server without the module", () => {
  it("is a ModuleNotLoadedError that says so", async () => {
    const bare = await Server.start({ module: false });
    const conn = await connect("ioredis", bare.port);
    try {
      await assert.rejects(new RateLimiter(conn.client).tokenBucket("k", 1, 1), (e: unknown) => {
        assert.ok(e instanceof ModuleNotLoadedError);
        assert.match(e.message, /module loaded/);
        return true;
      });
    } finally {
      await conn.close();
      bare.stop();
    }
  });
});

describe("a waiter unblocked by a failover", () => {
  it("gets a WaitInterruptedError (UNBLOCKED), not a plain error reply", async () => {
    const primary = await Server.start();
    const replica = await Server.start({ args: ["--replicaof", "127.0.0.1", String(primary.port)] });
    const conn = await connect("ioredis", primary.port);
    try {
      for (let i = 0; i < 100 && !(await rawCommand(primary.port, "INFO", "replication")).includes("state=online"); i++) await sleep(50);
      const limiter = new RateLimiter(conn.client);
      await limiter.tokenBucket("waiter", 1, 0.1);
      const waiting = limiter.tokenBucket("waiter", 1, 0.1, { block: 20_000 }).catch((e: unknown) => e);
      await sleep(200);
      assert.match(await rawCommand(primary.port, "FAILOVER"), /^\+OK/);
      const error = await waiting;
      assert.ok(error instanceof WaitInterruptedError, JSON.stringify(error));
      assert.match(error.message, /UNBLOCKED/);
    } finally {
      await conn.close();
      replica.stop();
      primary.stop();
    }
  });
});
