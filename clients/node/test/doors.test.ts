/**
 * Every door keeps the production rules (issue 30, the Node items): the
 * express-rate-limit store, `consume()`, the Express middleware and the
 * Fastify plugin, against real servers: a password refused, a server
 * without the module, Redis stopped and hung, resets, IPv6, prefixes that
 * would collide, options that cannot be honoured.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import express from "express";
import { rateLimit as expressRateLimit } from "express-rate-limit";
import Fastify from "fastify";
import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis6";
import { createClient } from "redis";
import {
  CircuitOpenError,
  FixedWindow,
  GCRA,
  type Logger,
  ModuleNotLoadedError,
  RateLimiter,
  RateLimiterRedis,
  RateLimiterRes,
  RedisConfigurationError,
  RedisRatelimitStore,
  SlidingCounter,
  TokenBucket,
  fastifyRateLimit,
  forwardedIp,
  normaliseIp,
  rateLimit,
} from "../src/index.js";
import { connect } from "./clients.js";
import { close, get, listen, port } from "./http.js";
import { PACKAGE, Server, sleep } from "./servers.js";

function recorder(): Logger & { warnings: string[]; errors: string[] } {
  const warnings: string[] = [];
  const errors: string[] = [];
  return { warnings, errors, warn: (m) => void warnings.push(m), error: (m) => void errors.push(m), info: () => undefined };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Settles with `promise`'s outcome, or "hung" after `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<{ value?: T; error?: unknown } | "hung"> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<"hung">((r) => (timer = setTimeout(() => r("hung"), ms)));
  try {
    return await Promise.race([promise.then((value) => ({ value }), (error: unknown) => ({ error })), hung]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `code` (an ES module that builds an app with the built package) as
 * its own process: its exit code and its stderr, or "started" when it
 * printed "listening" (it is then stopped).
 */
async function startApp(code: string): Promise<{ code: number | null; stderr: string } | "started"> {
  const file = join(PACKAGE, "build", `door-app-${process.pid}-${Math.random().toString(36).slice(2)}.mjs`);
  writeFileSync(file, code);
  const app = spawn(process.execPath, [file], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  app.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  try {
    return await new Promise((res) => {
      const timer = setTimeout(() => res("started"), 10_000);
      app.stdout.on("data", (c: Buffer) => {
        if (c.toString().includes("listening")) {
          clearTimeout(timer);
          res("started");
        }
      });
      app.on("exit", (code) => {
        clearTimeout(timer);
        res({ code, stderr });
      });
    });
  } finally {
    app.kill("SIGKILL");
    rmSync(file, { force: true });
  }
}

/** Runs a command to its end: its exit code and its output (stdout and stderr). */
function run(command: string, args: string[], options: { cwd: string }): Promise<{ code: number | null; output: string }> {
  return new Promise((res) => {
    const child = spawn(command, args, { cwd: options.cwd, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    child.on("exit", (code) => res({ code, output }));
  });
}

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

describe("the express-rate-limit store: prefixes and options", () => {
  it("two limiters' stores with one prefix stop the app at start-up (they would share counts)", async () => {
    const result = await startApp(`
      import express from "express";
      import { rateLimit } from "express-rate-limit";
      import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis6";
      import { RedisRatelimitStore } from "redis-ratelimit";
      const redis = new Redis(${server.port}, "127.0.0.1");
      const app = express();
      app.get("/a", rateLimit({ windowMs: 60000, limit: 10, store: new RedisRatelimitStore({ redis }) }), (q, r) => r.send("a"));
      app.get("/b", rateLimit({ windowMs: 60000, limit: 3, store: new RedisRatelimitStore({ redis, algorithm: "sliding-log" }) }), (q, r) => r.send("b"));
      app.listen(0, () => console.log("listening"));
    `);
    assert.notEqual(result, "started", "the app started with two limiters counting under rl:erl:");
    assert.notEqual((result as { code: number }).code, 0);
    assert.match((result as { stderr: string }).stderr, /already writes rl:erl:\*.*own prefix/s);
  });

  it("limiters with their own prefixes count apart", async () => {
    const conn = await connect("ioredis", server.port);
    const app = express();
    app.get("/a", expressRateLimit({ windowMs: 60_000, limit: 10, store: new RedisRatelimitStore({ redis: conn.client, prefix: "own:a:" }) }), (_q, r) => {
      r.send("a");
    });
    app.get("/b", expressRateLimit({ windowMs: 60_000, limit: 3, store: new RedisRatelimitStore({ redis: conn.client, prefix: "own:b:", algorithm: "sliding-log" }) }), (_q, r) => {
      r.send("b");
    });
    const http = await listen(app);
    try {
      for (let i = 0; i < 10; i++) assert.equal((await get(port(http), "/a")).status, 200);
      assert.equal((await get(port(http), "/b")).status, 200);
    } finally {
      await close(http);
      await conn.close();
    }
  });

  for (const [name, options] of [
    ["limit: -1", "limit: -1"],
    ["limit: 1e300", "limit: 1e300"],
    ["windowMs: 0.5", "windowMs: 0.5, limit: 5"],
    ["skipFailedRequests", "limit: 5, skipFailedRequests: true"],
    ["limit as a function, without the store's", "limit: () => 5"],
    ["limit: -1 with passOnStoreError", "limit: -1, passOnStoreError: true"],
  ] as const) {
    it(`${name}: the app stops at start-up with the reason`, async () => {
      const result = await startApp(`
        import express from "express";
        import { rateLimit } from "express-rate-limit";
        import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis6";
        import { RedisRatelimitStore } from "redis-ratelimit";
        const app = express();
        app.use(rateLimit({ windowMs: 60000, ${options}, store: new RedisRatelimitStore({ redis: new Redis(${server.port}, "127.0.0.1") }) }));
        app.get("/", (q, r) => r.send("ok"));
        app.listen(0, () => console.log("listening"));
      `);
      assert.notEqual(result, "started", "the app started");
      assert.match((result as { stderr: string }).stderr, /RedisRatelimitStore cannot honour these express-rate-limit options/);
    });
  }

  it("limit: 0 blocks every request, as express-rate-limit 7 and 8 say, without asking Redis", async () => {
    const conn = await connect("ioredis", server.port);
    const app = express();
    app.use(expressRateLimit({ windowMs: 60_000, limit: 0, validate: false, store: new RedisRatelimitStore({ redis: conn.client, prefix: "zero:" }) }));
    app.get("/", (_q, r) => r.send("ok"));
    const http = await listen(app);
    try {
      assert.deepEqual([(await get(port(http), "/")).status, (await get(port(http), "/")).status], [429, 429]);
      assert.deepEqual(await conn.raw("KEYS", "zero:*"), []);
    } finally {
      await close(http);
      await conn.close();
    }
  });
});

describe("a node-redis client never connected", () => {
  it("is a configuration error in the middleware, the store and consume(): never unlimited", async () => {
    const client = createClient({ socket: { port: server.port, host: "127.0.0.1" } }); // no connect()
    const logger = recorder();
    const app = express();
    app.use(rateLimit({ redis: client, limits: new FixedWindow(2, "1m"), scope: "never", logger }));
    app.get("/", (_q, r) => r.send("ok"));
    app.use((_e: unknown, _q: unknown, r: express.Response, _n: unknown) => void r.status(500).send("error"));
    const http = await listen(app);
    try {
      const statuses = [];
      for (let i = 0; i < 6; i++) statuses.push((await get(port(http), "/")).status);
      assert.deepEqual(statuses, [500, 500, 500, 500, 500, 500]);
      assert.equal(logger.errors.length, 1, logger.errors.join("\n"));
      assert.match(logger.errors[0]!, /CONFIGURATION ERROR.*client\.connect\(\)/);
    } finally {
      await close(http);
    }
    const store = new RedisRatelimitStore({ redis: client, prefix: "never:", logger: recorder() });
    store.init({ windowMs: 60_000, limit: 2 });
    await assert.rejects(store.increment("x"), RedisConfigurationError);
    const flexible = new RateLimiterRedis({ storeClient: client, points: 2, keyPrefix: "never-flx", logger: recorder() });
    await assert.rejects(flexible.consume("x"), RedisConfigurationError);
  });
});

describe("outages: the store and consume() have the middleware's budget and breaker", () => {
  async function outage(call: () => Promise<unknown>): Promise<{ firstMs: number; p50: number; p99: number; errors: unknown[] }> {
    const t0 = performance.now();
    const first = await within(call(), 3000);
    assert.notEqual(first, "hung", "the first call waited for Redis more than 3 s");
    const firstMs = performance.now() - t0;
    const times: number[] = [];
    const errors: unknown[] = [];
    for (let i = 0; i < 100; i++) {
      const t = performance.now();
      const r = await within(call(), 3000);
      assert.notEqual(r, "hung");
      times.push(performance.now() - t);
      errors.push((r as { error?: unknown }).error);
    }
    return { firstMs, p50: percentile(times, 50), p99: percentile(times, 99), errors };
  }

  for (const how of ["stopped (refused)", "hung (SIGSTOP)"] as const) {
    it(`Redis ${how}: a bounded first call, then microseconds with the breaker open`, async () => {
      const victim = await Server.start();
      const redis = new Redis({ port: victim.port, host: "127.0.0.1", maxRetriesPerRequest: null });
      redis.on("error", () => undefined);
      const store = new RedisRatelimitStore({ redis, prefix: "out:", timeoutMs: 150, cooldownMs: 60_000 });
      store.init({ windowMs: 60_000, limit: 1_000_000 });
      const flexible = new RateLimiterRedis({ storeClient: redis, points: 1_000_000, duration: 60, keyPrefix: "out-flx" });
      await store.increment("warm");
      if (how === "stopped (refused)") victim.stop();
      else victim.process.kill("SIGSTOP");
      try {
        for (const [door, call] of [
          ["store", () => store.increment("k")],
          ["consume", () => flexible.consume("k")],
        ] as const) {
          const m = await outage(call);
          assert.ok(m.firstMs < 1000, `${door}: first ${m.firstMs} ms`);
          assert.ok(m.p50 < 1, `${door}: p50 ${m.p50} ms`);
          assert.ok(m.p99 < 50, `${door}: p99 ${m.p99} ms`);
          assert.ok(m.errors.every((e) => e instanceof CircuitOpenError), `${door}: ${String(m.errors.find((e) => !(e instanceof CircuitOpenError)))}`);
        }
      } finally {
        if (how !== "stopped (refused)") victim.process.kill("SIGCONT");
        redis.disconnect();
        victim.stop();
      }
    });
  }

  it("through express-rate-limit with passOnStoreError: a hung Redis costs the budget once, then nothing", async () => {
    const victim = await Server.start();
    const conn = await connect("node-redis", victim.port);
    const app = express();
    app.use(
      expressRateLimit({
        windowMs: 60_000,
        limit: 5,
        passOnStoreError: true,
        store: new RedisRatelimitStore({ redis: conn.client, prefix: "pass:", cooldownMs: 60_000 }),
      }),
    );
    app.get("/", (_q, r) => r.send("ok"));
    const http = await listen(app);
    const quiet = console.error;
    console.error = () => undefined; // express-rate-limit logs each store error
    try {
      assert.equal((await get(port(http), "/")).status, 200);
      victim.process.kill("SIGSTOP");
      const t0 = performance.now();
      const first = await within(get(port(http), "/"), 3000);
      assert.notEqual(first, "hung");
      assert.ok(performance.now() - t0 < 1000);
      const t1 = performance.now();
      for (let i = 0; i < 20; i++) assert.equal((await get(port(http), "/")).status, 200);
      assert.ok(performance.now() - t1 < 1000, `20 requests took ${performance.now() - t1} ms`);
    } finally {
      console.error = quiet;
      victim.process.kill("SIGCONT");
      await close(http);
      await conn.close().catch(() => undefined);
      victim.stop();
    }
  });
});

describe("consume() and limits: what can never pass, and exact numbers", () => {
  it("a cost above the points rejects with a RangeError, not a result with msBeforeNext 0", async () => {
    const conn = await connect("ioredis", server.port);
    try {
      const limiter = new RateLimiterRedis({ storeClient: conn.client, points: 5, duration: 60, keyPrefix: "cost" });
      await assert.rejects(limiter.consume("u2", 6), RangeError);
      await limiter.consume("u1", 5);
      const rejected = await limiter.consume("u1", 1).then(
        () => assert.fail("allowed"),
        (r: unknown) => r,
      );
      assert.ok(rejected instanceof RateLimiterRes);
      assert.ok(rejected.msBeforeNext >= 1);
      assert.ok(Number(rejected.headers["Retry-After"]) >= 1);
    } finally {
      await conn.close();
    }
  });

  it("rates go out as the exact decimal, never 1e+308 or 0", async () => {
    const big = new TokenBucket(10, 1e308);
    const tiny = new TokenBucket(10, 1e-30);
    assert.equal(big.params()[1], `1${"0".repeat(308)}`);
    assert.equal(tiny.params()[1], `0.${"0".repeat(29)}1`);
    assert.equal(Number(tiny.params()[1]), 1e-30);
    assert.equal(new TokenBucket(10, 1.5e-7).params()[1], "0.00000015");
    const conn = await connect("ioredis", server.port);
    try {
      const d = await new RateLimiter(conn.client).check("exact", big);
      assert.equal(d.allowed, true);
    } finally {
      await conn.close();
    }
  });

  it("a window that is a number under a second, or a string without a unit, is refused as ambiguous", () => {
    assert.throws(() => new FixedWindow(10, 60), /60 ms.*"60s"/);
    assert.throws(() => new SlidingCounter(10, "60"), /not a duration/);
    assert.throws(() => new GCRA(1, 10, 999), /ms/);
    assert.equal(new FixedWindow(10, "60ms").windowMs(), 60);
    assert.equal(new FixedWindow(10, 60_000).windowMs(), 60_000);
  });
});

describe("a wrong or missing password, a missing permission: configuration errors, never an outage", () => {
  let locked: Server;
  before(async () => {
    locked = await Server.start({ args: ["--requirepass", "secret"], password: "secret" });
    await new Promise<void>((r) => setTimeout(r, 10));
    const admin = new Redis({ port: locked.port, host: "127.0.0.1", password: "secret" });
    await admin.call("ACL", "SETUSER", "pinger", "on", ">pw", "~*", "+ping");
    admin.disconnect();
  });
  after(() => locked.stop());

  it("Express, ioredis without the password: said at start-up, then 500, never unlimited", async () => {
    const redis = new Redis({ port: locked.port, host: "127.0.0.1" });
    redis.on("error", () => undefined);
    const logger = recorder();
    const mw = rateLimit({ redis, limits: new FixedWindow(2, "1m"), logger });
    const found = await mw.rule.started;
    assert.ok(found instanceof RedisConfigurationError, String(found));
    assert.match(logger.errors[0] ?? "", /CONFIGURATION ERROR.*NOAUTH.*password/);
    const app = express();
    app.use(mw);
    app.get("/", (_q, r) => r.send("ok"));
    app.use((_e: unknown, _q: unknown, r: express.Response, _n: unknown) => void r.status(500).send("error"));
    const http = await listen(app);
    try {
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push((await get(port(http), "/")).status);
      assert.deepEqual(statuses, [500, 500, 500, 500, 500]);
      assert.equal(logger.errors.length, 1);
    } finally {
      await close(http);
      redis.disconnect();
    }
  });

  it("Express over ioredis 6 without the password: every request 500, none let through after the first", async () => {
    const redis = new Redis6({ port: locked.port, host: "127.0.0.1" });
    redis.on("error", () => undefined);
    const logger = recorder();
    const mw = rateLimit({ redis, limits: new FixedWindow(2, "1m"), scope: "io6", logger, timeoutMs: 100 });
    const req = { method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null };
    try {
      for (let i = 0; i < 10; i++) {
        const outcome = await within(mw.rule.decide(req), 3000);
        assert.notEqual(outcome, "hung");
        const { error, value } = outcome as { error?: unknown; value?: unknown };
        assert.ok(error instanceof RedisConfigurationError, `request ${i}: ${error instanceof Error ? error.message : JSON.stringify(value)}`);
        await sleep(50);
      }
    } finally {
      redis.disconnect();
    }
  });

  it("node-redis with a wrong password, connecting in the background: not failed open after the timeout", async () => {
    const client = createClient({ socket: { port: locked.port, host: "127.0.0.1", reconnectStrategy: 50 }, password: "wrong" });
    client.on("error", () => undefined);
    client.connect().catch(() => undefined);
    const logger = recorder();
    const mw = rateLimit({ redis: client, limits: new FixedWindow(2, "1m"), scope: "wrongpass", logger, timeoutMs: 100 });
    await sleep(200);
    const req = { method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null };
    for (let i = 0; i < 3; i++) {
      await assert.rejects(mw.rule.decide(req), (e: unknown) => e instanceof Error && e.name === "RedisConfigurationError");
      await sleep(100);
    }
    await client.disconnect().catch(() => undefined);
  });

  it("Fastify: the registration fails (app.ready() rejects)", async () => {
    const redis = new Redis({ port: locked.port, host: "127.0.0.1", password: "wrong", maxRetriesPerRequest: 1 });
    redis.on("error", () => undefined);
    const app = Fastify();
    await assert.rejects(async () => {
      await app.register(fastifyRateLimit, { redis, limits: new TokenBucket(2, 1), logger: recorder() });
      await app.ready();
    }, RedisConfigurationError);
    await app.close().catch(() => undefined);
    redis.disconnect();
  });

  it("the store: 500 through express-rate-limit, and 429 (not unlimited) with passOnStoreError", async () => {
    const redis = new Redis({ port: locked.port, host: "127.0.0.1" });
    redis.on("error", () => undefined);
    const quiet = console.error;
    console.error = () => undefined;
    const app = express();
    const strict = new RedisRatelimitStore({ redis, prefix: "auth:strict:", logger: recorder() });
    const lenient = new RedisRatelimitStore({ redis, prefix: "auth:pass:", logger: recorder() });
    app.get("/strict", expressRateLimit({ windowMs: 60_000, limit: 5, store: strict }), (_q, r) => r.send("ok"));
    app.get("/pass", expressRateLimit({ windowMs: 60_000, limit: 5, passOnStoreError: true, store: lenient }), (_q, r) => r.send("ok"));
    app.use((_e: unknown, _q: unknown, r: express.Response, _n: unknown) => void r.status(500).send("error"));
    const http = await listen(app);
    try {
      assert.ok((await strict.started) instanceof RedisConfigurationError);
      assert.equal((await get(port(http), "/strict")).status, 500);
      for (let i = 0; i < 3; i++) assert.equal((await get(port(http), "/pass")).status, 429);
    } finally {
      console.error = quiet;
      await close(http);
      redis.disconnect();
    }
  });

  it("consume(): a NOPERM user rejects with a RedisConfigurationError, said once at start-up", async () => {
    const redis = new Redis({ port: locked.port, host: "127.0.0.1", username: "pinger", password: "pw" });
    redis.on("error", () => undefined);
    const logger = recorder();
    const limiter = new RateLimiterRedis({ storeClient: redis, points: 5, keyPrefix: "noperm", logger });
    assert.ok((await limiter.started) instanceof RedisConfigurationError);
    assert.match(logger.errors.join("\n"), /NOPERM.*permission/);
    await assert.rejects(limiter.consume("k"), RedisConfigurationError);
    assert.equal(logger.errors.length, 1);
    redis.disconnect();
  });
});

describe("a server without the module: found at start-up in every door", () => {
  let bare: Server;
  before(async () => {
    bare = await Server.start({ module: false });
  });
  after(() => bare.stop());

  it("Express: said once when built, then the fail mode (open: 200, closed: 503), never 500", async () => {
    const conn = await connect("ioredis", bare.port);
    const logger = recorder();
    const open = rateLimit({ redis: conn.client, limits: new FixedWindow(2, "1m"), scope: "open", logger });
    const closed = rateLimit({ redis: conn.client, limits: new FixedWindow(2, "1m"), scope: "closed", failOpen: false, logger: recorder() });
    assert.ok((await open.rule.started) instanceof ModuleNotLoadedError);
    assert.equal(logger.errors.length, 1);
    const app = express();
    app.get("/open", open, (_q, r) => r.send("ok"));
    app.get("/closed", closed, (_q, r) => r.send("ok"));
    const http = await listen(app);
    try {
      for (let i = 0; i < 3; i++) assert.equal((await get(port(http), "/open")).status, 200);
      const shut = await get(port(http), "/closed");
      assert.equal(shut.status, 503);
      assert.equal(logger.errors.length, 1, "once");
      assert.doesNotMatch(logger.errors[0]!, /127\.0\.0\.1/, "the key (the client's address) is not in the message");
    } finally {
      await close(http);
      await conn.close();
    }
  });

  it("Fastify: the registration fails; the store and consume() say it once when built", async () => {
    const conn = await connect("node-redis", bare.port);
    const app = Fastify();
    await assert.rejects(async () => {
      await app.register(fastifyRateLimit, { redis: conn.client, limits: new TokenBucket(2, 1), logger: recorder() });
      await app.ready();
    }, ModuleNotLoadedError);
    await app.close().catch(() => undefined);
    const logger = recorder();
    const store = new RedisRatelimitStore({ redis: conn.client, prefix: "bare:", logger });
    store.init({ windowMs: 60_000, limit: 5 });
    assert.ok((await store.started) instanceof ModuleNotLoadedError);
    const limiter = new RateLimiterRedis({ storeClient: conn.client, keyPrefix: "bare-flx", logger });
    assert.ok((await limiter.started) instanceof ModuleNotLoadedError);
    assert.equal(logger.errors.length, 2);
    await conn.close();
  });
});

describe("resets: one identity, in Redis and in the denial caches", () => {
  it("reset(identity) clears Redis and this process's cache; another process's cache follows within a second", async () => {
    const one = await connect("ioredis", server.port);
    const two = await connect("node-redis", server.port);
    const limits = new FixedWindow(2, "1h");
    // Two processes' worth of the same rule: two clients, two caches.
    const a = rateLimit({ redis: one.client, limits, scope: "login", penalty: "1h", logger: recorder() });
    const b = rateLimit({ redis: two.client, limits, scope: "login", penalty: "1h", logger: recorder() });
    const req = { method: "POST", path: "/login", headers: {}, ip: "10.9.8.7", raw: null };
    try {
      for (let i = 0; i < 3; i++) await a.rule.decide(req);
      assert.equal((await a.rule.decide(req)).action, "respond");
      assert.equal((await b.rule.decide(req)).action, "respond");
      await a.reset("ip:10.9.8.7");
      assert.equal((await a.rule.decide(req)).action, "pass", "reset at once in Redis and in a's cache");
      await one.raw("DEL", "rl:{ip:10.9.8.7}:login:fixedwindow");
      assert.equal((await b.rule.decide(req)).action, "respond", "b's cache still holds the denial");
      await sleep(1100);
      assert.equal((await b.rule.decide(req)).action, "pass", "within denialCache.maxAgeMs (1 s)");
    } finally {
      await one.close();
      await two.close();
    }
  });
});

describe("resets in Fastify", () => {
  it("fastify.rateLimitReset(identity) lets a denied client in at once", async () => {
    const conn = await connect("ioredis", server.port);
    const app = Fastify();
    await app.register(fastifyRateLimit, { redis: conn.client, limits: new FixedWindow(1, "1h"), scope: "freset", penalty: "1h", logger: recorder() });
    app.get("/", () => "ok");
    try {
      const status = async () => (await app.inject({ method: "GET", url: "/", remoteAddress: "10.1.2.3" })).statusCode;
      assert.deepEqual([await status(), await status(), await status()], [200, 429, 429]);
      await (app as unknown as { rateLimitReset: (identity: string) => Promise<void> }).rateLimitReset("ip:10.1.2.3");
      assert.equal(await status(), 200);
    } finally {
      await app.close();
      await conn.close();
    }
  });
});

describe("addresses: IPv6 grouped, one spelling each, not-an-ip refused, trust proxy warned", () => {
  it("normaliseIp: spellings of one address and addresses of one /56 are one identity", () => {
    const one = ["2001:db8::1", "2001:db8:0:0::1", "2001:0db8::0001", "[2001:db8::1]", "[2001:db8::1]:443", "2001:db8:0:ff::9", "2001:DB8::1%eth0"];
    assert.deepEqual(new Set(one.map((a) => normaliseIp(a))), new Set(["2001:db8:0:0:0:0:0:0/56"]));
    assert.equal(normaliseIp("2001:db8:0:100::1"), "2001:db8:0:100:0:0:0:0/56");
    assert.equal(normaliseIp("2001:db8:0:ff::9", 64), "2001:db8:0:ff:0:0:0:0/64");
    assert.equal(normaliseIp("2001:db8::1", false), "2001:db8:0:0:0:0:0:1");
    assert.equal(normaliseIp("::ffff:10.0.0.7"), "10.0.0.7");
    assert.equal(normaliseIp("10.0.0.7:5555"), "10.0.0.7");
    for (const bad of ["not-an-ip", "", "1.2.3", "2001:db8::1::2", "[::1"]) assert.equal(normaliseIp(bad), undefined, bad);
  });

  it("the middleware counts every spelling and every address of one /56 together; not-an-ip shares 'unknown' with a warning", async () => {
    const conn = await connect("ioredis", server.port);
    const logger = recorder();
    const mw = rateLimit({ redis: conn.client, key: forwardedIp(1), limits: new FixedWindow(4, "1m"), scope: "v6", logger, denialCache: false });
    const from = (xff: string) => mw.rule.decide({ method: "GET", path: "/", headers: { "x-forwarded-for": xff }, ip: "127.0.0.1", raw: null });
    try {
      const actions = [];
      for (const a of ["2001:db8::1", "2001:db8:0:0::1", "2001:0db8::0001", "[2001:db8::1]", "2001:db8:0:ab::77"]) actions.push((await from(a)).action);
      assert.deepEqual(actions, ["pass", "pass", "pass", "pass", "respond"]);
      await from("not-an-ip");
      assert.equal(await conn.raw("EXISTS", "rl:{unknown}:v6:fixedwindow"), 1);
      assert.match(logger.warnings.join("\n"), /not an IP address/);
    } finally {
      await conn.close();
    }
  });

  it("Express with trust proxy true: warned once", async () => {
    const conn = await connect("ioredis", server.port);
    const logger = recorder();
    const app = express();
    app.set("trust proxy", true);
    app.use(rateLimit({ redis: conn.client, limits: new FixedWindow(100, "1m"), scope: "trust", logger }));
    app.get("/", (_q, r) => r.send("ok"));
    const http = await listen(app);
    try {
      for (let i = 0; i < 3; i++) await get(port(http), "/", { "x-forwarded-for": `203.0.113.${i}` });
      assert.equal(logger.warnings.filter((w) => /trusts every proxy/.test(w)).length, 1);
    } finally {
      await close(http);
      await conn.close();
    }
  });

  it("Fastify with trustProxy true: warned once", async () => {
    const conn = await connect("node-redis", server.port);
    const logger = recorder();
    const app = Fastify({ trustProxy: true });
    await app.register(fastifyRateLimit, { redis: conn.client, limits: new FixedWindow(100, "1m"), scope: "ftrust", logger });
    app.get("/", () => "ok");
    try {
      for (let i = 0; i < 3; i++) await app.inject({ method: "GET", url: "/", headers: { "x-forwarded-for": `203.0.113.${i}` } });
      assert.equal(logger.warnings.filter((w) => /trusts every proxy/.test(w)).length, 1);
    } finally {
      await app.close();
      await conn.close();
    }
  });

  it("two client objects to one server: rules with other limits on the same keys are refused; the same app built again is not", () => {
    const one = new Redis({ port: server.port, host: "127.0.0.1" });
    const two = new Redis({ port: server.port, host: "127.0.0.1" });
    try {
      rateLimit({ redis: one, scope: "shared", limits: new FixedWindow(5, "1m"), logger: recorder() });
      assert.throws(
        () => rateLimit({ redis: two, scope: "shared", limits: new FixedWindow(9, "1h"), logger: recorder() }),
        /same server .* already writes rl:\{\*\}:shared:fixedwindow/,
      );
      rateLimit({ redis: two, scope: "shared", limits: new FixedWindow(5, "1m"), logger: recorder() });
    } finally {
      one.disconnect();
      two.disconnect();
    }
  });
});

describe("the package", () => {
  it("source maps carry their sources (src/ is not shipped)", () => {
    const maps = readdirSync(join(PACKAGE, "dist/esm")).filter((f) => f.endsWith(".js.map"));
    assert.ok(maps.length > 5);
    for (const f of maps) {
      const map = JSON.parse(readFileSync(join(PACKAGE, "dist/esm", f), "utf8")) as { sourcesContent?: unknown[] };
      assert.ok(Array.isArray(map.sourcesContent) && map.sourcesContent.length > 0, f);
    }
  });

  it("npm install <folder> of a checkout without dist gives a package that imports (prepare builds it)", async () => {
    const work = mkdtempSync(join(tmpdir(), "rl-folder-install-"));
    try {
      // The package as a checkout has it: its tracked files, no dist; its own
      // dependencies installed (npm ci), as the README says.
      const folder = join(work, "redis-ratelimit");
      mkdirSync(folder);
      for (const f of ["package.json", "tsconfig.json", "tsconfig.cjs.json", "README.md"]) cpSync(join(PACKAGE, f), join(folder, f));
      cpSync(join(PACKAGE, "src"), join(folder, "src"), { recursive: true });
      symlinkSync(join(PACKAGE, "node_modules"), join(folder, "node_modules"));
      const app = join(work, "app");
      mkdirSync(app);
      writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module" }));
      const npm = await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", folder], { cwd: app });
      assert.equal(npm.code, 0, npm.output);
      const imported = await run(process.execPath, ["-e", 'import("redis-ratelimit").then((m) => console.log(typeof m.RedisRatelimitStore))'], { cwd: app });
      assert.equal(imported.output.trim(), "function", imported.output);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it("an error that reaches Fastify's 500 body names no key (no client address)", async () => {
    const bare = await Server.start({ module: false });
    const conn = await connect("ioredis", bare.port);
    try {
      const error = await new RateLimiter(conn.client).check("rl:{ip:198.51.100.7}:x", new FixedWindow(1, "1m")).catch((e: unknown) => e);
      assert.ok(error instanceof ModuleNotLoadedError);
      assert.doesNotMatch(error.message, /198\.51\.100\.7/);
    } finally {
      await conn.close();
      bare.stop();
    }
  });

  it("the README's commands name no one machine's paths", () => {
    const readme = readFileSync(join(PACKAGE, "README.md"), "utf8");
    assert.doesNotMatch(readme, /RL_MODULE=\/(?!path\/)/);
  });
});
