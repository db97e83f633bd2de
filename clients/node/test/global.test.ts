/**
 * The leased global limit (`GlobalLimit`) against real servers: processes
 * sharing one key stay within the bound, split it fairly, account for every
 * unit, give back what they did not spend, and a Redis that stops or hangs
 * never holds a request.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import express from "express";
import Fastify from "fastify";
import { Redis } from "ioredis";
import {
  FixedWindow,
  GlobalLimit,
  type GlobalLimitStats,
  LeakyBucket,
  type Logger,
  RateLimiter,
  SlidingLog,
  TokenBucket,
  fastifyRateLimit,
  rateLimit,
} from "../src/index.js";
import type { ChildArgs } from "./global-child.js";
import { close, get, listen, port } from "./http.js";
import { PACKAGE, Server, sleep } from "./servers.js";

const run = promisify(execFile);
const quiet: Logger = { warn: () => undefined, error: () => undefined };

let server: Server;
let redis: Redis;
before(async () => {
  server = await Server.start();
  redis = new Redis({ port: server.port, host: "127.0.0.1" });
});
after(() => {
  redis.disconnect();
  server.stop();
});

interface ChildResult {
  attempted: number;
  times: Array<[number, number]>;
  stats: GlobalLimitStats;
}

/** `procs` processes, each with its own GlobalLimit on `key`, all starting together (at `startAt`, default in 1.5 s). */
async function share(args: Omit<ChildArgs, "port" | "startAt"> & { startAt?: number }, procs: number): Promise<ChildResult[]> {
  // Each call to Redis may take 2 s (not the default 200 ms): on this shared, loaded machine a
  // slow reply would otherwise fail open, allowing without quota, which these tests do not measure.
  const full: ChildArgs = { ...args, port: server.port, startAt: args.startAt ?? Date.now() + 1500, options: { timeoutMs: 2000, ...args.options } };
  const child = join(PACKAGE, "build/test/global-child.js");
  const outs = await Promise.all(
    Array.from({ length: procs }, () => run(process.execPath, [child, JSON.stringify(full)], { maxBuffer: 64 << 20 })),
  );
  return outs.map(({ stdout }) => JSON.parse(stdout) as ChildResult);
}

function accounted(s: GlobalLimitStats): void {
  assert.equal(s.held, 0);
  assert.equal(s.refundsLost, 0);
  assert.equal(s.granted, s.spent + s.refunded + s.refundDeclined, JSON.stringify(s));
}

describe("processes sharing one GlobalLimit", () => {
  it("a FixedWindow(300, 1s) shared by 4 processes never allows more than 300 in a window", async () => {
    const limit = 300;
    const results = await share(
      { key: "g:fw", limit: ["fixedwindow", limit, "1s"], demand: 200, seconds: 3, maxLeaseMs: 1000 },
      4,
    );
    const perWindow = new Map<number, number>();
    let straddling = 0;
    for (const { times } of results) {
      for (const [b, a] of times) {
        const w = Math.floor(b / 1000);
        if (w === Math.floor(a / 1000)) perWindow.set(w, (perWindow.get(w) ?? 0) + 1);
        else straddling++;
      }
    }
    const total = results.reduce((n, r) => n + r.times.length, 0);
    // A unit is spent only in the window that granted it: no window holds more.
    assert.ok(Math.max(...perWindow.values()) <= limit, JSON.stringify([...perWindow]));
    assert.ok(straddling <= total / 100, `${straddling} of ${total}`);
    for (const r of results) {
      assert.equal(r.stats.spent, r.times.length);
      accounted(r.stats);
    }
    // Demand 800/s, far above 300/s: each full window is mostly used, with far fewer calls than requests.
    const spent = results.reduce((n, r) => n + r.stats.spent, 0);
    const calls = results.reduce((n, r) => n + r.stats.calls, 0);
    assert.ok(spent >= (perWindow.size - 2) * limit * 0.5, `${spent} spent over ${perWindow.size} windows`);
    assert.ok(calls < spent / 2, `${calls} calls for ${spent} spent`);
  });

  it("a TokenBucket shared by 4 processes stays within capacity + rate x (T + 2 x maxLease), every unit accounted for", async () => {
    const capacity = 200;
    const rate = 400;
    const maxLeaseMs = 500;
    const seconds = 2.5;
    const t0 = Date.now();
    const results = await share({ key: "g:tb", limit: ["tokenbucket", capacity, rate], demand: 250, seconds, maxLeaseMs }, 4);
    const allowed = results.reduce((n, r) => n + r.times.length, 0);
    const last = Math.max(...results.flatMap((r) => r.times.map(([, a]) => a)));
    const span = (last - t0) / 1000; // from before any grant to the last request allowed
    assert.ok(allowed <= capacity + rate * (span + (2 * maxLeaseMs) / 1000), `${allowed} allowed in ${span} s`);
    for (const r of results) {
      assert.equal(r.stats.spent, r.times.length);
      accounted(r.stats);
    }
    // Demand 1000/s, far above 400/s: most of the allowance is used.
    assert.ok(allowed >= (capacity + rate * seconds) * 0.7, `${allowed} allowed`);
  });

  it("4 processes of equal demand at 2x a TokenBucket split it fairly, each scarce one asking at interval x (1 + U)", async (t) => {
    // TokenBucket(2000, 2000), four processes asking 1,000 a second each, 6 s.
    // Measured here (min/max of allowed): this rule 0.84-0.97 (19 runs); the
    // rule before it (a fixed cadence, scarcity left on any whole grant)
    // 0.69-0.96 (13 runs): Node's timer jitter already shuffled its order,
    // so the share alone does not tell them apart here. The asks do: 225-283
    // a process before, 158-186 with this rule (a scarce ask every 1.5
    // intervals on average, and a process stays scarce while the bucket is
    // empty).
    const seconds = 6;
    const results = await share({ key: "g:fair", limit: ["tokenbucket", 2000, 2000], demand: 1000, seconds, maxLeaseMs: 1000 }, 4);
    const got = results.map((r) => r.times.length);
    const calls = results.map((r) => r.stats.calls);
    t.diagnostic(`allowed per process ${JSON.stringify(got)}, min/max ${(Math.min(...got) / Math.max(...got)).toFixed(3)}, calls ${JSON.stringify(calls)}`);
    assert.ok(Math.min(...got) >= 0.75 * Math.max(...got), `allowed ${JSON.stringify(got)}`);
    // 2000 + 2000 x 6 s in all, give or take what the leases and the start cost.
    const total = got.reduce((a, b) => a + b, 0);
    assert.ok(total >= 12_000 && total <= 2000 + 2000 * (seconds + 2), String(total));
    // At most one ask per interval (25 ms) while not scarce (the first second, the bucket's
    // 2,000 spent), one per 1.5 intervals on average after: far under one per interval.
    // (210: this rule measured up to 186, the old one from 225.)
    for (const c of calls) assert.ok(c <= (0.875 * seconds * 1000) / 25, `calls ${JSON.stringify(calls)}`);
    for (const r of results) accounted(r.stats);
  });

  it("4 processes of equal demand at 5x a TokenBucket split it fairly: the ask after the longest gap moves between them", async (t) => {
    // TokenBucket(2000, 2000), four processes asking 2,500 a second each, 4 s.
    // Measured here (min/max of allowed): this rule 0.72-0.92 (12 runs); the rule
    // before it, whose fixed cadence kept one order of asks (the same process
    // after the longest gap, taking most of what refilled), 0.16-0.50 (5 runs).
    const results = await share({ key: "g:fair5", limit: ["tokenbucket", 2000, 2000], demand: 2500, seconds: 4, maxLeaseMs: 1000 }, 4);
    const got = results.map((r) => r.times.length);
    t.diagnostic(`allowed per process ${JSON.stringify(got)}, min/max ${(Math.min(...got) / Math.max(...got)).toFixed(3)}`);
    assert.ok(Math.min(...got) >= 0.65 * Math.max(...got), `allowed ${JSON.stringify(got)}`);
    for (const r of results) accounted(r.stats);
  });

  it("a GCRA shared by 4 processes stays within burst + 1 + rate x (T + 2 x maxLease)", async (t) => {
    const burst = 199; // limit 200
    const rate = 400;
    const maxLeaseMs = 500;
    const seconds = 2.5;
    const t0 = Date.now() + 1500; // no process asks for quota before it starts
    const results = await share({ key: "g:gcra", limit: ["gcra", burst, rate, "1s"], demand: 250, seconds, maxLeaseMs, startAt: t0 }, 4);
    const allowed = results.reduce((n, r) => n + r.times.length, 0);
    const last = Math.max(...results.flatMap((r) => r.times.map(([, a]) => a)));
    const span = (last - t0) / 1000;
    const bound = burst + 1 + rate * (span + (2 * maxLeaseMs) / 1000);
    t.diagnostic(`${allowed} allowed in ${span} s; the bound ${bound}`);
    assert.ok(allowed <= bound, `${allowed} allowed in ${span} s`);
    for (const r of results) {
      assert.equal(r.stats.spent, r.times.length);
      accounted(r.stats);
    }
    // Demand 1000/s, far above 400/s: most of the allowance is used.
    assert.ok(allowed >= (burst + 1 + rate * seconds) * 0.7, `${allowed} allowed`);
  });

  it("a SlidingCounter shared by 4 processes: the estimate made of what was spent never passes the limit (leases end with their sub-window)", async (t) => {
    const limit = 300;
    const precision = 4;
    const windowMs = 1000;
    const results = await share(
      { key: "g:sc", limit: ["slidingcounter", limit, "1s", precision], demand: 200, seconds: 3, maxLeaseMs: 1000 },
      4,
    );
    // Every spend, in time order; at each, the server's estimate over what was spent so far:
    // the sub-windows (window / precision, from the epoch) of the last window whole, the
    // oldest weighted by its share still inside it.
    const spends = results.flatMap((r) => r.times.map(([b]) => b)).sort((a, b) => a - b);
    const counts = new Map<number, number>();
    let worst = 0;
    for (const t of spends) {
      const k = Math.floor((t * precision) / windowMs);
      counts.set(k, (counts.get(k) ?? 0) + 1);
      let estimate = (counts.get(k - precision) ?? 0) * (k + 1 - (t * precision) / windowMs);
      for (let j = k - precision + 1; j <= k; j++) estimate += counts.get(j) ?? 0;
      worst = Math.max(worst, estimate);
    }
    t.diagnostic(`the estimate over what was spent: at most ${worst.toFixed(1)} (limit ${limit})`);
    assert.ok(worst <= limit + 1e-6, `the estimate over what was spent reached ${worst}, over ${limit}`);
    for (const r of results) {
      assert.equal(r.stats.spent, r.times.length);
      accounted(r.stats);
    }
    // Demand 800/s, far above 300/s: the limit is mostly used (300 a window, 3 s).
    assert.ok(spends.length >= 0.6 * limit * 3, `${spends.length} spent`);
  });
});

describe("one GlobalLimit", () => {
  it("refuses the algorithms without partial grants, and wrong options", () => {
    assert.throws(() => new GlobalLimit(redis, "g:x", new LeakyBucket(10, 1)), /leases from TokenBucket, GCRA, FixedWindow or SlidingCounter.*not LeakyBucket/);
    assert.throws(() => new GlobalLimit(redis, "g:x", new SlidingLog(10, "1m")), /not SlidingLog/);
    assert.throws(() => new GlobalLimit(redis, "g:x", new TokenBucket(10, 1), { interval: 2000 }), /interval must be below maxLease/);
    assert.throws(() => new GlobalLimit(redis, "g:x", new TokenBucket(10, 1), { maxlease: 10 } as object), /unknown option "maxlease"/);
    assert.throws(() => new GlobalLimit(redis, "", new TokenBucket(10, 1)), /non-empty string/);
  });

  it("gives back exactly what it did not spend on close()", async () => {
    const bucket = new TokenBucket(10_000, 0.001);
    const gl = new GlobalLimit(redis, "g:close", bucket, { maxLease: 5000, idle: 5000 });
    for (let i = 0; i < 300; i++) {
      assert.equal(await gl.allowAsync(), true, `request ${i}: ${JSON.stringify(gl.stats())}`);
      await sleep(1);
    }
    const held = gl.stats();
    assert.ok(held.granted > held.spent, JSON.stringify(held)); // some held when it closes
    await gl.close();
    const s = gl.stats();
    assert.equal(s.held, 0);
    assert.equal(s.refunded, s.granted - s.spent);
    assert.equal(s.refundsLost, 0);
    assert.equal((await new RateLimiter(redis).peek("g:close", bucket)).remaining, 10_000 - s.spent);
    assert.equal(gl.allow(), false); // closed: nothing held, nothing asked
  });

  it("a grant that lands after close() goes back", async () => {
    const bucket = new TokenBucket(1000, 0.001);
    const gl = new GlobalLimit(redis, "g:late", bucket, { maxBatch: 50 });
    const asked = gl.allowAsync(); // its grant is in flight when close() starts
    await gl.close();
    assert.equal(await asked, false);
    const s = gl.stats();
    assert.equal(s.granted, 1);
    assert.equal(s.refunded, 1);
    assert.equal((await new RateLimiter(redis).peek("g:late", bucket)).remaining, 1000);
  });

  it("gives back what is left when a lease ends, and when demand drops", async () => {
    const bucket = new TokenBucket(10_000, 0.001);
    for (const [key, options] of [
      ["g:lease", { maxLease: 300, idle: 10_000 }],
      ["g:idle", { maxLease: 5000, idle: 100 }],
    ] as const) {
      const gl = new GlobalLimit(redis, key, bucket, options);
      await gl.allowAsync();
      for (let i = 0; i < 200; i++) {
        gl.allow();
        await sleep(1);
      }
      await sleep(700);
      const s = gl.stats();
      assert.equal(s.held, 0, key);
      assert.ok(s.refunded > 0, `${key}: ${JSON.stringify(s)}`);
      assert.equal(s.refunded, s.granted - s.spent, key);
      assert.equal((await new RateLimiter(redis).peek(key, bucket)).remaining, 10_000 - s.spent, key);
      await gl.close();
    }
  });

  it("a scarce process asks at most once per interval, however often it runs dry", async () => {
    // 10 a second, asked for 2,000 a second: every grant comes back short.
    const gl = new GlobalLimit(redis, "g:scarce", new TokenBucket(10, 10), { interval: 20, logger: quiet });
    await gl.allowAsync();
    const t0 = performance.now();
    while (performance.now() - t0 < 600) {
      gl.allow();
      await sleep(0.5);
    }
    const elapsed = performance.now() - t0;
    const s = gl.stats();
    await gl.close();
    assert.ok(s.denied > 0, JSON.stringify(s));
    // One ask per 20 ms at most (the first request's own ask, and one in flight at the end, on top).
    assert.ok(s.calls <= elapsed / 20 + 2, `${s.calls} calls in ${elapsed} ms`);
  });
});

describe("a GlobalLimit whose Redis fails", () => {
  async function fillThenFail(how: "stop" | "hang", failOpen: boolean) {
    const victim = await Server.start();
    // No offline queue: with the server gone a command fails at once (refused), as a hung one times out.
    const client = new Redis({ port: victim.port, host: "127.0.0.1", maxRetriesPerRequest: 0, enableOfflineQueue: false });
    client.on("error", () => undefined);
    await new Promise((ready) => client.once("ready", ready));
    const gl = new GlobalLimit(client, "g:down", new TokenBucket(100_000, 100_000), {
      failOpen,
      idle: 5000,
      timeoutMs: 50,
      cooldownMs: 200,
      logger: quiet,
    });
    assert.equal(await gl.started, undefined);
    for (let i = 0; i < 300; i++) {
      assert.equal(await gl.allowAsync(), true, JSON.stringify(gl.stats()));
      await sleep(1);
    }
    const held = gl.stats().held;
    if (how === "stop") victim.stop();
    else victim.process.kill("SIGSTOP");
    const answers: boolean[] = [];
    let slowest = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < 400) {
      const b = performance.now();
      answers.push(gl.allow());
      slowest = Math.max(slowest, performance.now() - b);
      await sleep(1);
    }
    return { victim, client, gl, held, answers, slowest };
  }

  it("stopped: spends what is held, then fails closed", async () => {
    const { client, gl, held, answers } = await fillThenFail("stop", false);
    const s = gl.stats();
    const n = Math.min(held, answers.length);
    assert.ok(n > 0);
    assert.deepEqual(answers.slice(0, n), Array<boolean>(n).fill(true));
    assert.equal(answers[answers.length - 1], false);
    assert.ok(s.failedClosed > 0 && s.failedOpen === 0, JSON.stringify(s));
    await gl.close();
    client.disconnect();
  });

  it("a refund that cannot be sent is retried once, then counted in refundsLost and logged, never lost silently", async () => {
    const victim = await Server.start();
    const client = new Redis({ port: victim.port, host: "127.0.0.1", maxRetriesPerRequest: 0, enableOfflineQueue: false });
    client.on("error", () => undefined);
    await new Promise((ready) => client.once("ready", ready));
    const warnings: string[] = [];
    const gl = new GlobalLimit(client, "g:lost", new TokenBucket(100_000, 100_000), {
      maxLease: 5000,
      idle: 5000,
      logger: { warn: (m) => warnings.push(m) },
    });
    for (let i = 0; i < 100; i++) {
      await gl.allowAsync();
      await sleep(1);
    }
    const held = gl.stats().held;
    assert.ok(held > 0, JSON.stringify(gl.stats()));
    victim.stop();
    await gl.close();
    const s = gl.stats();
    assert.equal(s.refundsLost, held, JSON.stringify(s));
    assert.equal(s.granted, s.spent + s.refunded + s.refundDeclined + s.refundsLost);
    // One warning per lease, saying its units: together, all that was held.
    const logged = warnings.map((w) => Number(/could not refund (\d+) unit\(s\)/.exec(w)?.[1] ?? 0));
    assert.equal(logged.reduce((a, b) => a + b, 0), held, JSON.stringify(warnings));
    client.disconnect();
  });

  it("stopped, failOpen: every request allowed", async () => {
    const { client, gl, answers } = await fillThenFail("stop", true);
    await gl.close();
    assert.ok(answers.every((a) => a));
    assert.ok(gl.stats().failedOpen > 0);
    client.disconnect();
  });

  it("hung (SIGSTOP): allow() never waits, fails closed once what was held is spent, and leasing resumes after", async () => {
    const { victim, client, gl, answers, slowest } = await fillThenFail("hang", false);
    try {
      const hung = gl.stats();
      // allow() is synchronous: the event loop kept turning (sleep(1) ran ~400 times), and no call waited.
      assert.ok(answers.length > 100, `${answers.length} answers`);
      assert.ok(slowest < 40, `slowest allow() ${slowest} ms`); // a wait on Redis would take its timeout, 50 ms
      assert.ok(hung.failedClosed > 0, JSON.stringify(hung));
      victim.process.kill("SIGCONT");
      const t1 = performance.now();
      while (performance.now() - t1 < 800) {
        gl.allow();
        await sleep(1);
      }
      const back = gl.stats();
      assert.ok(back.granted > hung.granted, JSON.stringify([hung, back])); // the breaker closed again: leasing resumed
      assert.ok(back.spent > hung.spent);
      await gl.close();
    } finally {
      victim.process.kill("SIGCONT");
      client.disconnect();
      victim.stop();
    }
  });
});

describe("the middleware with a GlobalLimit", () => {
  it("Express: rateLimit({ limits: globalLimit }) allows from what is held, then 429 with Retry-After", async () => {
    const gl = new GlobalLimit(redis, "g:mw", new FixedWindow(5, "1m"), { logger: quiet });
    const app = express();
    app.use(rateLimit({ limits: gl }));
    app.get("/", (_req, res) => {
      res.send("ok");
    });
    const http = await listen(app);
    try {
      const replies = [];
      for (let i = 0; i < 7; i++) replies.push(await get(port(http), "/"));
      assert.deepEqual(
        replies.map((r) => r.status),
        [200, 200, 200, 200, 200, 429, 429],
      );
      // Until the minute's window ends, when the limit grants again.
      const retry = Number(replies[6]!.headers["retry-after"]);
      assert.ok(retry >= 1 && retry <= 60, String(retry));
    } finally {
      await close(http);
      await gl.close();
    }
    assert.equal(gl.stats().spent, 5);
  });

  it("Fastify: the plugin takes a GlobalLimit too, with a cost per request", async () => {
    const gl = new GlobalLimit(redis, "g:fy", new FixedWindow(6, "1m"), { logger: quiet });
    const app = Fastify();
    await app.register(fastifyRateLimit, { limits: gl, cost: 2 });
    app.get("/", () => "ok");
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await app.inject({ method: "GET", url: "/" })).statusCode);
      assert.deepEqual(statuses, [200, 200, 200, 429]);
    } finally {
      await app.close();
      await gl.close();
    }
    assert.equal(gl.stats().spent, 6);
  });

  it("fail closed with nothing held and Redis gone: 503, as a rule's fail mode", async () => {
    const victim = await Server.start();
    const client = new Redis({ port: victim.port, host: "127.0.0.1", maxRetriesPerRequest: 0, enableOfflineQueue: false });
    client.on("error", () => undefined);
    await new Promise((ready) => client.once("ready", ready));
    const gl = new GlobalLimit(client, "g:mw503", new TokenBucket(10, 10), { failOpen: false, logger: quiet });
    await gl.started;
    victim.stop();
    const app = express();
    app.use(rateLimit({ limits: gl }));
    app.get("/", (_req, res) => {
      res.send("ok");
    });
    const http = await listen(app);
    try {
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await get(port(http), "/")).status);
      assert.deepEqual(statuses, [503, 503, 503]);
    } finally {
      await close(http);
      await gl.close();
      client.disconnect();
    }
  });

  it("refuses options that a GlobalLimit decides itself, and mixing it with per-client limits", () => {
    const gl = new GlobalLimit(redis, "g:mw2", new TokenBucket(10, 10), { logger: quiet });
    assert.throws(() => rateLimit({ limits: gl, failOpen: false }), /failOpen.*GlobalLimit's own/);
    assert.throws(() => rateLimit({ redis, limits: [gl, new TokenBucket(10, 1)] as never }), /stack two middlewares/);
    void gl.close();
  });
});

describe("docs/clients.md", () => {
  it("the Node GlobalLimit example runs and prints what it says", async () => {
    const page = readFileSync(join(PACKAGE, "../../docs/clients.md"), "utf8");
    const section = page.slice(page.indexOf("## One limit for a whole fleet, from Node"));
    const code = /```js\n([\s\S]*?)```/.exec(section)?.[1];
    assert.ok(code !== undefined && code.includes("new Redis(6379)"), "the section has a js block that connects with new Redis(6379)");
    const expected = [...code.matchAll(/\/\/ -> (.*)$/gm)].map((m) => m[1]!);
    // Inside the package, so that `import "redis-ratelimit"` names this package.
    const file = join(PACKAGE, "build", "docs-global-limit.mjs");
    writeFileSync(file, code.replace("new Redis(6379)", `new Redis(${server.port})`));
    try {
      const { stdout } = await run(process.execPath, [file]);
      assert.deepEqual(stdout.trimEnd().split("\n"), expected);
    } finally {
      rmSync(file, { force: true });
    }
  });
});
