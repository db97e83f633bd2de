/** The Express middleware and its production rules, against real servers. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer as createTcpServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import express from "express";
import { Redis } from "ioredis";
import { parseList } from "structured-headers";
import {
  FixedWindow,
  GCRA,
  InvalidArgumentError,
  type Logger,
  RateLimiter,
  SlidingCounter,
  TokenBucket,
  apiKey,
  clientIp,
  forwardedIp,
  rateLimit,
} from "../src/index.js";
import { type Connected, connect } from "./clients.js";
import { close, get, listen, port } from "./http.js";
import { Server, freePort, sleep } from "./servers.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

function quietLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, warn: (m) => void warnings.push(m), info: () => undefined };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

describe("Express middleware", () => {
  let conn: Connected;
  before(async () => {
    conn = await connect("ioredis", server.port);
  });
  after(() => conn.close());
  beforeEach(async () => {
    await conn.raw("FLUSHALL");
  });

  it("answers 429 with every header, and the app never sees a denied request", async () => {
    const app = express();
    let seen = 0;
    app.use(
      rateLimit({
        redis: conn.client,
        scope: "t1",
        limits: [new TokenBucket(3, 1), new SlidingCounter(100, "1m", { name: "per-minute" })],
      }),
    );
    app.get("/hello", (_req, res) => {
      seen++;
      res.json({ hello: "world" });
    });
    const http = await listen(app);
    try {
      const replies = [];
      for (let i = 0; i < 4; i++) replies.push(await get(port(http), "/hello"));
      assert.deepEqual(
        replies.map((r) => r.status),
        [200, 200, 200, 429],
      );
      assert.equal(seen, 3);
      const ok = replies[0]!.headers;
      assert.equal(ok["x-ratelimit-limit"], "3");
      assert.equal(ok["x-ratelimit-remaining"], "2");
      assert.equal(ok["x-ratelimit-reset"], "1");
      assert.equal(ok["ratelimit-policy"], '"tokenbucket";q=3;w=3, "per-minute";q=100;w=60');
      assert.match(ok.ratelimit!, /^"tokenbucket";r=2;t=1, "per-minute";r=99;t=\d+$/);
      const denied = replies[3]!;
      assert.equal(denied.headers["x-ratelimit-remaining"], "0");
      assert.equal(denied.headers["x-ratelimit-reset"], "1");
      assert.equal(denied.headers["retry-after"], "1");
      assert.equal(denied.headers["content-type"], "text/plain; charset=utf-8");
      assert.equal(denied.body, "Too many requests: retry in 1 s.\n");
      for (const r of replies) {
        parseList(r.headers.ratelimit!);
        parseList(r.headers["ratelimit-policy"]!);
      }
      // all or nothing: the denied request took nothing from the minute
      const info = await new RateLimiter(conn.client).info("rl:{ip:127.0.0.1}:t1:per-minute");
      assert.equal(info?.remaining, 97);
    } finally {
      await close(http);
    }
  });

  it("a request without an identity is limited under a shared one, with one warning (unix socket)", async () => {
    const logger = quietLogger();
    const app = express();
    app.use(rateLimit({ redis: conn.client, scope: "uds", limits: new FixedWindow(2, "1m"), logger }));
    app.get("/", (_req, res) => res.send("ok"));
    const dir = mkdtempSync(join(tmpdir(), "rl-uds-"));
    const socket = join(dir, "app.sock");
    const http = await listen(app, socket);
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await get(socket, "/")).status);
      assert.deepEqual(statuses, [200, 200, 429, 429]);
      assert.equal(logger.warnings.length, 1);
      assert.match(logger.warnings[0]!, /cannot tell who sent/);
      assert.equal(await conn.raw("EXISTS", "rl:{unknown}:uds:fixedwindow"), 1);
    } finally {
      await close(http);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("onMissingIdentity: 'refuse' answers 403; a key of null exempts on purpose", async () => {
    const app = express();
    app.use(
      "/strict",
      rateLimit({
        redis: conn.client,
        scope: "strict",
        limits: new FixedWindow(5, "1m"),
        key: (r) => (r.headers["x-user"] as string | undefined) ?? undefined,
        onMissingIdentity: "refuse",
        logger: quietLogger(),
      }),
    );
    app.use(
      "/open",
      rateLimit({ redis: conn.client, scope: "open", limits: new FixedWindow(1, "1m"), key: (r) => (r.path === "/health" ? null : "all") }),
    );
    app.get("/strict", (_req, res) => res.send("ok"));
    app.get("/open/health", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      assert.equal((await get(port(http), "/strict")).status, 403);
      assert.equal((await get(port(http), "/strict", { "x-user": "ann" })).status, 200);
      for (let i = 0; i < 3; i++) {
        const r = await get(port(http), "/open/health");
        assert.equal(r.status, 200);
        assert.equal(r.headers["x-ratelimit-limit"], undefined);
      }
    } finally {
      await close(http);
    }
  });

  it("errors at start-up: unknown options, bad values, duplicate names, two rules on one key", () => {
    const redis = conn.client;
    assert.throws(() => rateLimit({ redis, limits: new FixedWindow(5, "1m"), failOpne: false } as never), /unknown option "failOpne"/);
    assert.throws(() => rateLimit({ redis, limits: new FixedWindow(5, "1 minute") }), /not a duration/);
    assert.throws(() => rateLimit({ redis, limits: new FixedWindow(5, "1m"), cost: 0 }), /cost/);
    assert.throws(() => rateLimit({ redis, limits: new FixedWindow(5, "1m"), shadow: "no" as never }), /shadow must be true or false/);
    assert.throws(() => rateLimit({ redis, limits: [new FixedWindow(5, "1m"), new FixedWindow(50, "1h")] }), /must differ/);
    assert.throws(() => rateLimit({ redis, limits: [] }), /at least one limit/);
    assert.throws(() => rateLimit({ redis: {}, limits: new FixedWindow(5, "1m") }), /expected a Redis client/);
    rateLimit({ redis, scope: "admin", limits: new FixedWindow(5, "1m") });
    assert.throws(() => rateLimit({ redis, scope: "admin", limits: new FixedWindow(9, "1h") }), /already writes rl:\{\*\}:admin:fixedwindow/);
    rateLimit({ redis, scope: "public", limits: new FixedWindow(5, "1m") });
  });

  it("validate() asks the server once, so a limit it refuses fails at boot", async () => {
    const mw = rateLimit({ redis: conn.client, scope: "v", limits: new GCRA(0, 2_000_000_000, "1s"), logger: quietLogger() });
    await assert.rejects(mw.rule.validate(), InvalidArgumentError);
    const good = rateLimit({ redis: conn.client, scope: "v2", limits: new TokenBucket(5, 1) });
    await good.rule.validate();
    assert.equal(await conn.raw("DBSIZE"), 0);
  });

  it("key functions: forwardedIp trusts only its proxies, apiKey is hashed", () => {
    const req = (headers: Record<string, string>) => ({ method: "GET", path: "/", headers, ip: "10.0.0.1", raw: null });
    assert.equal(forwardedIp(1)(req({ "x-forwarded-for": "6.6.6.6, 1.2.3.4" })), "ip:1.2.3.4");
    assert.equal(forwardedIp(2)(req({ "x-forwarded-for": "1.2.3.4" })), "ip:10.0.0.1");
    const k = apiKey()(req({ "x-api-key": "secret" }));
    assert.match(k!, /^key:[0-9a-f]{32}$/);
    assert.equal(apiKey("x-api-key", null)(req({})), null);
    assert.equal(apiKey()(req({})), "ip:10.0.0.1");
  });

  it("the local denial cache answers known denials without Redis, headers still exact", async () => {
    const app = express();
    app.use(rateLimit({ redis: conn.client, scope: "dc", limits: new FixedWindow(5, "1h"), denialCache: { maxAgeMs: 60_000 } }));
    app.get("/", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      await conn.raw("CONFIG", "RESETSTAT");
      const replies = [];
      for (let i = 0; i < 200; i++) replies.push(await get(port(http), "/"));
      assert.equal(replies.filter((r) => r.status === 200).length, 5);
      const stats = String(await conn.raw("INFO", "commandstats"));
      const calls = Number(/cmdstat_rl\.fixedwindow:calls=(\d+)/.exec(stats)?.[1]);
      assert.equal(calls, 6, "the limit, then one denial; the other 194 answered locally");
      const first = replies[5]!.headers;
      const last = replies[199]!.headers;
      assert.equal(last["x-ratelimit-remaining"], "0");
      assert.equal(last["x-ratelimit-limit"], "5");
      assert.ok(Number(last["retry-after"]) <= Number(first["retry-after"]));
      assert.ok(Number(last["retry-after"]) >= Number(first["retry-after"]) - 1);
      // aged by the time that passed (the window's end, seen a few hundred ms later)
      const t = (h: Record<string, string>) => Number(/;t=(\d+)$/.exec(h.ratelimit!)?.[1]);
      assert.ok(t(last) === t(first) || t(last) === t(first) - 1, `${first.ratelimit} then ${last.ratelimit}`);
    } finally {
      await close(http);
    }
  });

  it("one RL.ALL for several limits: a 429 from one spends none", async () => {
    const app = express();
    app.use(
      rateLimit({
        redis: conn.client,
        scope: "multi",
        limits: [new FixedWindow(2, "1m", { name: "small" }), new FixedWindow(100, "1h", { name: "big" })],
        denialCache: false,
      }),
    );
    app.get("/", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      for (let i = 0; i < 5; i++) await get(port(http), "/");
      const info = await new RateLimiter(conn.client).info("rl:{ip:127.0.0.1}:multi:big");
      assert.equal(info?.remaining, 98);
    } finally {
      await close(http);
    }
  });
});

describe("one rule, several identities", () => {
  it("per IP and per API key in one RL.ALL: all or nothing, one set of headers", async () => {
    const conn = await connect("ioredis", server.port);
    const app = express();
    app.use(
      rateLimit({
        redis: conn.client,
        scope: "ids",
        limits: [
          { limit: new FixedWindow(5, "1m", { name: "per-ip" }), key: clientIp },
          { limit: new FixedWindow(2, "1m", { name: "per-key" }), key: apiKey("x-api-key", null) },
        ],
        denialCache: false,
      }),
    );
    app.get("/", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      const withKey = [];
      for (let i = 0; i < 3; i++) withKey.push(await get(port(http), "/", { "x-api-key": "A" }));
      assert.deepEqual(
        withKey.map((r) => r.status),
        [200, 200, 429],
      );
      const denied = withKey[2]!.headers;
      assert.equal(denied["x-ratelimit-limit"], "2", "one value: the per-key limit that denied");
      assert.equal(denied["ratelimit-policy"], '"per-ip";q=5;w=60, "per-key";q=2;w=60');
      const info = await new RateLimiter(conn.client).info("rl:{ip:127.0.0.1}:ids:per-ip");
      assert.equal(info?.remaining, 3, "the 429 spent nothing of the per-IP limit");
      const anonymous = await get(port(http), "/");
      assert.equal(anonymous.status, 200);
      assert.equal(anonymous.headers["ratelimit-policy"], '"per-ip";q=5;w=60', "no API key: only the per-IP limit applies");
    } finally {
      await close(http);
      await conn.close();
    }
  });
});

describe("Redis down: the circuit breaker", () => {
  it("refused connections: fail open, microseconds a request after the first failure", async () => {
    const deadPort = await freePort();
    const redis = new Redis({ port: deadPort, host: "127.0.0.1", lazyConnect: false, maxRetriesPerRequest: 1 });
    redis.on("error", () => undefined);
    const logger = quietLogger();
    const mw = rateLimit({ redis, limits: new FixedWindow(5, "1m"), logger, cooldownMs: 60_000 });
    const app = express();
    app.use(mw);
    app.get("/", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      const first = performance.now();
      assert.equal((await get(port(http), "/")).status, 200);
      const firstMs = performance.now() - first;
      assert.ok(firstMs < 1000, `first request ${firstMs} ms (the 200 ms budget)`);
      const added: number[] = [];
      for (let i = 0; i < 100; i++) {
        const t = performance.now();
        const v = await mw.rule.decide({ method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null });
        added.push(performance.now() - t);
        assert.equal(v.action, "pass");
      }
      assert.ok(percentile(added, 50) < 1, `p50 ${percentile(added, 50)} ms`);
      assert.ok(percentile(added, 99) < 50, `p99 ${percentile(added, 99)} ms`);
      assert.equal((await get(port(http), "/")).status, 200);
      assert.equal(logger.warnings.length, 1, "one outage line, not one per request");
    } finally {
      await close(http);
      redis.disconnect();
    }
  });

  it("a hung Redis: 503 when failing closed, and limiting again once it is back", async () => {
    const hung = await Server.start();
    const conn = await connect("node-redis", hung.port);
    const mw = rateLimit({
      redis: conn.client,
      limits: new FixedWindow(5, "1m"),
      failOpen: false,
      timeoutMs: 100,
      cooldownMs: 300,
      logger: quietLogger(),
    });
    const app = express();
    app.use(mw);
    app.get("/", (_req, res) => res.send("ok"));
    const http = await listen(app);
    try {
      assert.equal((await get(port(http), "/")).status, 200);
      hung.process.kill("SIGSTOP");
      const t0 = performance.now();
      const r = await get(port(http), "/");
      assert.equal(r.status, 503);
      assert.ok(performance.now() - t0 < 1000);
      const fast: number[] = [];
      for (let i = 0; i < 50; i++) {
        const t = performance.now();
        assert.equal((await mw.rule.decide({ method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null })).action, "respond");
        fast.push(performance.now() - t);
      }
      assert.ok(percentile(fast, 50) < 1, `p50 ${percentile(fast, 50)} ms`);
      assert.ok(percentile(fast, 99) < 50, `p99 ${percentile(fast, 99)} ms`);
      hung.process.kill("SIGCONT");
      const back = performance.now();
      let status = 503;
      while (status !== 200 && performance.now() - back < 5000) {
        await sleep(50);
        status = (await get(port(http), "/")).status;
      }
      assert.equal(status, 200, "limiting again after the cool-down");
      assert.ok(performance.now() - back < 2000);
    } finally {
      await close(http);
      await conn.close().catch(() => undefined);
      hung.stop();
    }
  });

  it("a server that accepts and never answers costs the budget once, then nothing", async () => {
    const silent = createTcpServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
    const redis = new Redis({ port: (silent.address() as { port: number }).port, host: "127.0.0.1" });
    redis.on("error", () => undefined);
    const mw = rateLimit({ redis, limits: new FixedWindow(5, "1m"), timeoutMs: 150, logger: quietLogger() });
    try {
      const req = { method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null };
      const t = performance.now();
      assert.equal((await mw.rule.decide(req)).action, "pass");
      const first = performance.now() - t;
      assert.ok(first >= 140 && first < 1000, `first ${first} ms`);
      const times: number[] = [];
      for (let i = 0; i < 100; i++) {
        const t2 = performance.now();
        await mw.rule.decide(req);
        times.push(performance.now() - t2);
      }
      assert.ok(percentile(times, 50) < 1, `p50 ${percentile(times, 50)} ms`);
      assert.ok(percentile(times, 99) < 50, `p99 ${percentile(times, 99)} ms`);
      assert.equal(mw.rule.breaker.open, true);
    } finally {
      redis.disconnect();
      silent.close();
    }
  });
});
