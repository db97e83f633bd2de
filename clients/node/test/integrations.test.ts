/** The express-rate-limit store, the Fastify plugin and the rate-limiter-flexible facade, against a real server. */
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import express from "express";
import { rateLimit as expressRateLimit } from "express-rate-limit";
import Fastify from "fastify";
import { FixedWindow, RateLimiterRedis, RateLimiterRes, RedisRatelimitStore, TokenBucket, fastifyRateLimit } from "../src/index.js";
import { type Connected, KINDS, connect } from "./clients.js";
import { close, get, listen, port } from "./http.js";
import { Server } from "./servers.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

for (const kind of KINDS) {
  describe(`express-rate-limit store over ${kind}`, () => {
    let conn: Connected;
    before(async () => {
      conn = await connect(kind, server.port);
    });
    after(() => conn.close());
    beforeEach(async () => {
      await conn.raw("FLUSHALL");
    });

    it("counts hits, tells the reset time, resets a key, gets without counting", async () => {
      const store = new RedisRatelimitStore({ redis: conn.client });
      store.init({ windowMs: 60_000, limit: 3 });
      assert.equal(store.localKeys, false);
      assert.equal(store.prefix, "rl:erl:");
      const before = Date.now();
      const one = await store.increment("client");
      assert.equal(one.totalHits, 1);
      assert.ok(one.resetTime instanceof Date);
      assert.ok(one.resetTime.getTime() > before && one.resetTime.getTime() <= Date.now() + 60_000);
      assert.equal((await store.increment("client")).totalHits, 2);
      assert.equal((await store.get("client"))?.totalHits, 2);
      assert.equal((await store.get("client"))?.totalHits, 2);
      assert.equal((await store.increment("client")).totalHits, 3);
      assert.equal((await store.increment("client")).totalHits, 4, "past the limit");
      assert.equal((await store.increment("other")).totalHits, 1, "keys are apart");
      await store.resetKey("client");
      assert.equal(await store.get("client"), undefined);
      assert.equal((await store.increment("client")).totalHits, 1);
    });

    it("takes the limit from the store when express-rate-limit's is a function", async () => {
      const store = new RedisRatelimitStore({ redis: conn.client, limit: 3, algorithm: "sliding-log", prefix: "rl:erl:fn:" });
      store.init({ windowMs: 60_000, limit: () => 3 });
      assert.equal((await store.increment("c")).totalHits, 1);
    });
  });
}

describe("express-rate-limit with the store: one line changed", () => {
  let conn: Connected;
  before(async () => {
    conn = await connect("ioredis", server.port);
  });
  after(() => conn.close());

  it("limits, with express-rate-limit's own headers and 429", async () => {
    const app = express();
    app.use(
      expressRateLimit({
        windowMs: 60_000,
        limit: 3,
        standardHeaders: "draft-8",
        legacyHeaders: false,
        store: new RedisRatelimitStore({ redis: conn.client, prefix: "erl-e2e:" }),
      }),
    );
    app.get("/", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      const replies = [];
      for (let i = 0; i < 5; i++) replies.push(await get(port(http), "/"));
      assert.deepEqual(
        replies.map((r) => r.status),
        [200, 200, 200, 429, 429],
      );
      assert.match(replies[0]!.headers.ratelimit!, /r=2;\s*t=\d+/);
      assert.match(replies[2]!.headers.ratelimit!, /r=0;\s*t=\d+/);
      assert.ok(replies[3]!.headers["retry-after"] !== undefined);
      const keys = (await conn.raw("KEYS", "erl-e2e:*")) as string[];
      assert.equal(keys.length, 1);
    } finally {
      await close(http);
    }
  });
});

describe("Fastify plugin", () => {
  let conn: Connected;
  before(async () => {
    conn = await connect("node-redis", server.port);
  });
  after(() => conn.close());

  it("answers 429 with the headers before the handler runs", async () => {
    const app = Fastify();
    let seen = 0;
    await app.register(fastifyRateLimit, { redis: conn.client, limits: new TokenBucket(2, 1), scope: "fastify" });
    app.get("/", () => {
      seen++;
      return { hello: "world" };
    });
    try {
      const replies = [];
      for (let i = 0; i < 3; i++) replies.push(await app.inject({ method: "GET", url: "/" }));
      assert.deepEqual(
        replies.map((r) => r.statusCode),
        [200, 200, 429],
      );
      assert.equal(seen, 2);
      assert.equal(replies[0]!.headers["x-ratelimit-remaining"], "1");
      assert.equal(replies[0]!.headers["ratelimit-policy"], '"tokenbucket";q=2;w=2');
      assert.equal(replies[2]!.headers["retry-after"], "1");
      assert.equal(replies[2]!.body, "Too many requests: retry in 1 s.\n");
      assert.equal(replies[2]!.headers["content-type"], "text/plain; charset=utf-8");
    } finally {
      await app.close();
    }
  });

  it("start-up errors fail the registration", async () => {
    const app = Fastify();
    assert.throws(() => new FixedWindow(1, "1 minute"), /not a duration/);
    await assert.rejects(async () => {
      await app.register(fastifyRateLimit, { redis: conn.client, limits: new FixedWindow(1, "1m"), failOpne: true } as never);
      await app.ready();
    }, /unknown option "failOpne"/);
  });
});

describe("rate-limiter-flexible facade", () => {
  let conn: Connected;
  before(async () => {
    conn = await connect("ioredis", server.port);
  });
  after(() => conn.close());

  it("consume resolves, then rejects with msBeforeNext, remainingPoints, consumedPoints", async () => {
    const limiter = new RateLimiterRedis({ storeClient: conn.client, points: 3, duration: 60, keyPrefix: "flx" });
    const first = await limiter.consume("user", 2);
    assert.deepEqual([first.remainingPoints, first.consumedPoints, first.isFirstInDuration], [1, 2, true]);
    assert.ok(first.msBeforeNext > 0 && first.msBeforeNext <= 60_000);
    try {
      await limiter.consume("user", 2);
      assert.fail("should have been rejected");
    } catch (rejection) {
      assert.ok(rejection instanceof RateLimiterRes);
      assert.equal(rejection.remainingPoints, 0);
      assert.equal(rejection.consumedPoints, 4);
      assert.ok(rejection.msBeforeNext > 0 && rejection.msBeforeNext <= 60_000);
      assert.ok(Number(rejection.headers["Retry-After"]) >= 1);
    }
    assert.equal((await limiter.consume("user", 1)).remainingPoints, 0, "the rejection took nothing");
    assert.equal((await limiter.get("user"))?.consumedPoints, 3);
    assert.equal(await limiter.get("nobody"), null);
    assert.equal(await limiter.delete("user"), true);
    assert.equal((await limiter.consume("user")).remainingPoints, 2);
  });

  it("blockDuration blocks the key once it passes its points", async () => {
    // A window of a minute: with one of a second, the two consumes (1-2 ms apart) fell on
    // both sides of a window's end in one CI run, and the second was allowed. Still far
    // shorter than the block, so only the block can make the wait pass 590 s.
    const limiter = new RateLimiterRedis({ storeClient: conn.client, points: 1, duration: 60, blockDuration: 600, keyPrefix: "flxb" });
    await limiter.consume("k");
    await assert.rejects(limiter.consume("k"), (r: unknown) => r instanceof RateLimiterRes && r.msBeforeNext > 590_000);
  });
});
