/** Named policies (issue 32): by name as inline, in the middleware and the store, and syncPolicies, against real servers. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import express from "express";
import Fastify from "fastify";
import { Redis } from "ioredis";
import { rateLimit as expressRateLimit } from "express-rate-limit";
import {
  FixedWindow,
  GCRA,
  LeakyBucket,
  type Limit,
  NamedPolicy,
  PolicyNotFoundError,
  PolicySyncError,
  RateLimiter,
  RedisRatelimitStore,
  Rule,
  fastifyRateLimit,
  SlidingCounter,
  SlidingLog,
  TokenBucket,
  forgetRules,
  keySlot,
  parseDefinition,
  policyKeys,
  policyWords,
  rateLimit,
  syncPolicies,
} from "../src/index.js";
import { CLUSTER_KINDS, type Connected, KINDS, connect, connectCluster } from "./clients.js";
import { close, get, listen, port } from "./http.js";
import { Cluster, PACKAGE, Server, rawCommand } from "./servers.js";

const INLINE: Limit[] = [
  new TokenBucket(3, 1),
  new SlidingCounter(3, "1m", { precision: 4 }),
  new FixedWindow(3, "1h"),
  new SlidingLog(3, "60s"),
  new LeakyBucket(3, 1),
  new GCRA(2, 1, "1s"),
];

const PLANS = {
  "plan:free": { tiers: [{ algorithm: "fixedwindow", limit: 100, window: "1h" }] },
  "plan:pro": {
    tiers: [
      { algorithm: "tokenbucket", capacity: 20, rate: 5 },
      { algorithm: "fixedwindow", limit: 10000, window: "1d" },
    ]
  },
  "plan:enterprise": "TOKENBUCKET 200 50 SLIDINGCOUNTER 1000000 1d PRECISION 24",
};

describe("without a server", () => {
  it("a definition's words read back to the inline limits", () => {
    for (const limit of INLINE) {
      const d = parseDefinition([limit.word, ...limit.spec.params, "PENALTY", "30s", "SHADOW", "ON-CHANGE", "reset"]);
      assert.equal(d.tiers.length, 1);
      assert.deepEqual(d.tiers[0]!.spec.policy, limit.spec.policy);
      assert.deepEqual(d.tiers[0]!.spec.params, limit.spec.params);
      assert.deepEqual([d.penalty, d.shadow, d.onChange], ["30s", true, "RESET"]);
    }
    // The server's words: a bare number is seconds there.
    assert.equal(parseDefinition(["FIXEDWINDOW", "5", "60"]).tiers[0]!.windowMs(), 60_000);
  });

  it("the structured form is the limit classes' fields; bad ones say what is wrong", () => {
    assert.deepEqual(policyWords(PLANS["plan:pro"]), ["TOKENBUCKET", 20, "5", "FIXEDWINDOW", 10000, "86400000ms"]);
    assert.deepEqual(policyWords("TOKENBUCKET 1 2"), ["TOKENBUCKET", "1", "2"]);
    // Durations in a file are the server's: a number, or a string without a unit, is seconds.
    const window = (w: unknown): unknown => policyWords({ tiers: [{ algorithm: "fixedwindow", limit: 1, window: w }] })[2];
    assert.deepEqual([window(60), window("60"), window("1m"), window("250ms")], ["60000ms", "60000ms", "60000ms", "250ms"]);
    const bad: Array<[unknown, RegExp]> = [
      [{ tiers: [] }, /non-empty/],
      [{ tiers: [{ algorithm: "bucket" }] }, /unknown algorithm "bucket"/],
      [{ tiers: [{ algorithm: "tokenbucket", capacity: 1 }] }, /rate is missing/],
      [{ tiers: [{ algorithm: "fixedwindow", limit: 0, window: 1 }] }, /tier 0 \(fixedwindow\)/],
      [{ tiers: [{ algorithm: "slidinglog", limit: 1, window: 1 }], x: 1 }, /unknown field/],
      [{ tiers: [{ algorithm: "slidinglog", limit: 1, window: 1 }], on_change: "y" }, /on_change/],
      [[], /empty/],
    ];
    for (const [definition, says] of bad) assert.throws(() => policyWords(definition), says);
  });

  it("a policy of several tiers keys each tier in one slot", () => {
    assert.deepEqual(policyKeys("user:42", 1), ["user:42"]);
    assert.deepEqual(policyKeys("user:42", 3), ["{user:42}:0", "{user:42}:1", "{user:42}:2"]);
    assert.deepEqual(policyKeys("rl:{ip:1}:api", 2), ["rl:{ip:1}:api:0", "rl:{ip:1}:api:1"]);
    for (const keys of [policyKeys("user:42", 3), policyKeys("rl:{ip:1}:api", 2)]) {
      assert.equal(new Set(keys.map(keySlot)).size, 1);
    }
  });

  it("a rule leaves penalty and shadow to its policy", () => {
    for (const option of [{ penalty: "1h" }, { shadow: true }]) {
      const lazy = new Redis({ lazyConnect: true });
      assert.throws(() => new Rule({ redis: lazy, limits: new NamedPolicy("plan:free"), ...option }), /the policy's own/);
      lazy.disconnect();
    }
  });

  it("a NamedPolicy's name is checked when made", () => {
    for (const bad of ["", "a b", "x".repeat(129), "é"]) assert.throws(() => new NamedPolicy(bad), /policy name/);
    assert.throws(() => new NamedPolicy(() => "plan:free"), /label/);
    assert.throws(() => new NamedPolicy(() => "p", { label: "plan" }).staticName(), /Rule/);
  });
});

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

async function dropPolicies(raw: (...args: string[]) => Promise<unknown>): Promise<void> {
  for (const pair of (await raw("RL.POLICY", "LIST")) as unknown[][]) await raw("RL.POLICY", "DEL", String(pair[0]));
}

for (const kind of KINDS) {
  describe(`named policies over ${kind}`, () => {
    let conn: Connected;
    let limiter: RateLimiter;
    before(async () => {
      conn = await connect(kind, server.port);
      limiter = new RateLimiter(conn.client);
    });
    after(async () => {
      await dropPolicies((...a) => conn.raw(...a));
      await conn.close();
    });
    beforeEach(async () => {
      await conn.raw("FLUSHALL");
      await dropPolicies((...a) => conn.raw(...a));
      limiter.policies.forget();
    });

    it("a check by name answers as the inline limit, for each algorithm", async () => {
      for (const [i, limit] of INLINE.entries()) {
        await conn.raw("RL.POLICY", "SET", `p${i}`, limit.word, ...limit.spec.params.map(String));
        for (let n = 0; n <= limit.quota; n++) {
          const byName = await limiter.check(`a${i}`, new NamedPolicy(`p${i}`));
          const inline = await limiter.check(`b${i}`, limit);
          assert.deepEqual([byName.allowed, byName.limit, byName.remaining], [inline.allowed, inline.limit, inline.remaining], limit.word);
          assert.equal(byName.policy?.item(), inline.policy?.item(inline.policy.name.replace(/.*/, `p${i}`)));
          assert.equal(byName.policy?.unitMs, inline.policy?.unitMs);
          assert.deepEqual(Object.keys(byName.headers()), Object.keys(inline.headers()));
        }
        const peeked = await limiter.peek(`a${i}`, new NamedPolicy(`p${i}`));
        assert.equal(peeked.remaining, (await limiter.peek(`b${i}`, limit)).remaining);
      }
    });

    it("a policy of three tiers answers as RL.ALL, one key per tier", async () => {
      const tiers = [new TokenBucket(5, 1), new FixedWindow(3, "1h"), new SlidingLog(4, "60s")];
      await conn.raw("RL.POLICY", "SET", "three", ...tiers.flatMap((t) => [t.word, ...t.spec.params.map(String)]));
      const keys = policyKeys("b", 3);
      let last;
      for (let n = 0; n < 4; n++) {
        last = await limiter.check("a", new NamedPolicy("three"));
        const inline = await limiter.checkAll(keys.map((k, i) => [k, tiers[i]!] as const));
        assert.deepEqual(
          last.tiers.map((t) => [t.allowed, t.limit, t.remaining]),
          inline.tiers.map((t) => [t.allowed, t.limit, t.remaining]),
        );
      }
      assert.equal(last?.allowed, false);
      assert.deepEqual(
        last?.tiers.map((t) => t.policy?.name),
        ["three:0", "three:1", "three:2"],
      );
    });

    it("a wrong call throws at once, as for a limit", () => {
      assert.throws(() => limiter.check("k", new NamedPolicy("p"), { block: 0 }), /ambiguous/);
      assert.throws(() => limiter.check("", new NamedPolicy("p")), /non-empty/);
      assert.throws(() => limiter.check("k", new NamedPolicy(() => "p", { label: "l" })), /Rule/);
    });

    it("a check by a deleted policy throws an error naming it", async () => {
      await conn.raw("RL.POLICY", "SET", "plan:gone", "FIXEDWINDOW", "5", "1h");
      assert.equal((await limiter.check("a", new NamedPolicy("plan:gone"))).allowed, true);
      await conn.raw("RL.POLICY", "DEL", "plan:gone");
      await assert.rejects(limiter.check("a", new NamedPolicy("plan:gone")), (error: unknown) => {
        assert.ok(error instanceof PolicyNotFoundError);
        assert.equal(error.policy, "plan:gone");
        return true;
      });
    });

    it("syncPolicies applies, a second run changes nothing, a changed one says old -> new", async () => {
      const report = await syncPolicies(conn.client, PLANS);
      assert.deepEqual(report.changes.map((c) => c.status), ["created", "created", "created"]);
      assert.equal(Object.keys(report.digests).length, 1);
      const again = await syncPolicies(limiter, PLANS);
      assert.deepEqual(again.changes.map((c) => c.status), ["unchanged", "unchanged", "unchanged"]);
      assert.deepEqual(again.digests, report.digests);
      const raised = await syncPolicies(conn.client, { ...PLANS, "plan:free": "FIXEDWINDOW 200 1h" });
      const changed = raised.changes.filter((c) => c.status === "changed");
      assert.equal(changed.length, 1);
      assert.equal(changed[0]!.name, "plan:free");
      assert.equal(changed[0]!.newVersion, (changed[0]!.oldVersion ?? 0) + 1);
      assert.equal((await limiter.check("u", new NamedPolicy("plan:free"))).limit, 200);
    });

    it("a bad set applies nothing and lists every error; prune and dry run", async () => {
      await syncPolicies(conn.client, { "plan:free": PLANS["plan:free"] });
      const digest = await conn.raw("RL.POLICY", "DIGEST");
      const bad = {
        ...PLANS,
        "plan:free": "FIXEDWINDOW 1 1h",
        "plan:broken": "TOKENBUCKET 0 1",
        "plan:typo": "TOKENBUCKIT 1 1",
        "plan:struct": { tiers: [{ algorithm: "fixedwindow", limit: 1 }] },
        "bad name": "FIXEDWINDOW 1 1h",
      };
      await assert.rejects(syncPolicies(conn.client, bad), (error: unknown) => {
        assert.ok(error instanceof PolicySyncError);
        assert.deepEqual([...new Set(error.report.errors.map((e) => e.name))].sort(), ["bad name", "plan:broken", "plan:struct", "plan:typo"]);
        return true;
      });
      assert.equal(await conn.raw("RL.POLICY", "DIGEST"), digest);
      const dir = mkdtempSync(join(tmpdir(), "rl-policies-"));
      try {
        const file = join(dir, "plans.json");
        writeFileSync(file, JSON.stringify({ "plan:pro": PLANS["plan:pro"] }));
        const dry = await syncPolicies(conn.client, file, { prune: true, dryRun: true });
        assert.deepEqual(dry.changes.map((c) => [c.name, c.status]), [["plan:pro", "created"], ["plan:free", "deleted"]]);
        assert.deepEqual(((await conn.raw("RL.POLICY", "LIST")) as unknown[][]).map((p) => String(p[0])), ["plan:free"]);
        await syncPolicies(conn.client, file, { prune: true });
        assert.deepEqual(((await conn.raw("RL.POLICY", "LIST")) as unknown[][]).map((p) => String(p[0])), ["plan:pro"]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

describe("middleware by policy name", () => {
  let conn: Connected;
  before(async () => {
    conn = await connect("ioredis", server.port);
  });
  after(async () => {
    await dropPolicies((...a) => conn.raw(...a));
    await conn.close();
  });
  beforeEach(async () => {
    await conn.raw("FLUSHALL");
    await dropPolicies((...a) => conn.raw(...a));
    forgetRules(conn.client);
  });

  it("Express: 429 and the inline limit's headers, following a change without a restart", async () => {
    await conn.raw("RL.POLICY", "SET", "plan:free", "FIXEDWINDOW", "2", "1h");
    const app = express();
    app.use(rateLimit({ redis: conn.client, limits: new NamedPolicy("plan:free"), denialCache: false }));
    app.get("/", (_req, res) => void res.send("hi"));
    const http = await listen(app);
    try {
      const replies = [];
      for (let i = 0; i < 3; i++) replies.push(await get(port(http), "/"));
      assert.deepEqual(replies.map((r) => r.status), [200, 200, 429]);
      assert.equal(replies[2]!.headers["ratelimit-policy"], '"plan:free";q=2;w=3600');
      assert.equal(replies[2]!.headers["x-ratelimit-limit"], "2");
      assert.ok(Number(replies[2]!.headers["retry-after"]) > 0);
      const keys = (await conn.raw("KEYS", "rl:*")) as string[];
      assert.deepEqual(keys.filter((k) => !k.includes("validate")), ["rl:{ip:127.0.0.1}:plan:free"]);
      await conn.raw("RL.POLICY", "SET", "plan:free", "FIXEDWINDOW", "4", "1h");
      const after = [];
      for (let i = 0; i < 3; i++) after.push(await get(port(http), "/"));
      assert.deepEqual(after.map((r) => r.status), [200, 200, 429]);
      assert.equal(after[1]!.headers["ratelimit-policy"], '"plan:free";q=4;w=3600');
    } finally {
      await close(http);
    }
  });

  it("Express: a policy per request (its plan), several tiers keyed in the identity's slot", async () => {
    await conn.raw("RL.POLICY", "SET", "plan:free", "FIXEDWINDOW", "1", "1h");
    await conn.raw("RL.POLICY", "SET", "plan:pro", "TOKENBUCKET", "3", "1", "FIXEDWINDOW", "1000", "1d");
    const plans: Record<string, string> = { k1: "free", k2: "pro" };
    const app = express();
    app.use(
      rateLimit({
        redis: conn.client,
        key: (r) => `key:${String(r.headers["x-api-key"])}`,
        limits: new NamedPolicy((r: { headers: Record<string, string> }) => `plan:${plans[r.headers["x-api-key"]!]!}`, { label: "plan" }),
      }),
    );
    app.get("/", (_req, res) => void res.send("hi"));
    const http = await listen(app);
    try {
      const free = [await get(port(http), "/", { "x-api-key": "k1" }), await get(port(http), "/", { "x-api-key": "k1" })];
      assert.deepEqual(free.map((r) => r.status), [200, 429]);
      const pro = [];
      for (let i = 0; i < 4; i++) pro.push(await get(port(http), "/", { "x-api-key": "k2" }));
      assert.deepEqual(pro.map((r) => r.status), [200, 200, 200, 429]);
      assert.equal(pro[0]!.headers["ratelimit-policy"], '"plan:0";q=3;w=3, "plan:1";q=1000;w=86400');
      assert.deepEqual(((await conn.raw("KEYS", "rl:{key:k2}:*")) as string[]).sort(), ["rl:{key:k2}:plan:0", "rl:{key:k2}:plan:1"]);
    } finally {
      await close(http);
    }
  });

  it("a rule on an undefined policy says so at start-up; one deleted later takes the fail mode", async () => {
    const logger = { warn: () => undefined, error: () => undefined, info: () => undefined };
    const missing = new Rule({ redis: conn.client, limits: new NamedPolicy("plan:nobody"), scope: "m", logger });
    const error = await missing.started;
    assert.ok(error instanceof PolicyNotFoundError && error.policy === "plan:nobody");
    await conn.raw("RL.POLICY", "SET", "plan:soon-gone", "FIXEDWINDOW", "5", "1h");
    const rule = new Rule({ redis: conn.client, limits: new NamedPolicy("plan:soon-gone"), failOpen: false, scope: "g", logger });
    assert.equal(await rule.started, undefined);
    const request = { method: "GET", path: "/", headers: {}, ip: "10.0.0.7", raw: {} };
    assert.equal((await rule.decide(request)).action, "pass");
    await conn.raw("RL.POLICY", "DEL", "plan:soon-gone");
    const verdict = await rule.decide(request);
    assert.equal(verdict.action === "respond" ? verdict.status : 200, 503);
  });

  it("Fastify: 429 with the policy's headers", async () => {
    await conn.raw("RL.POLICY", "SET", "plan:f", "TOKENBUCKET", "2", "1");
    const app = Fastify();
    await app.register(fastifyRateLimit, { redis: conn.client, limits: new NamedPolicy("plan:f"), scope: "fastify" });
    app.get("/", () => ({ hello: "world" }));
    try {
      const replies = [];
      for (let i = 0; i < 3; i++) replies.push(await app.inject({ method: "GET", url: "/" }));
      assert.deepEqual(replies.map((r) => r.statusCode), [200, 200, 429]);
      assert.equal(replies[0]!.headers["ratelimit-policy"], '"plan:f";q=2;w=2');
      assert.equal(replies[2]!.headers["retry-after"], "1");
    } finally {
      await app.close();
    }
  });

  it("servers left holding different policies are an error", async () => {
    const other = await Server.start();
    const second = await connect("ioredis", other.port);
    try {
      await second.raw("RL.POLICY", "SET", "plan:local", "FIXEDWINDOW", "1", "1h");
      await assert.rejects(syncPolicies([conn.client, second.client], PLANS), (error: unknown) => {
        assert.ok(error instanceof PolicySyncError && /different policies/.test(error.message));
        assert.equal(new Set(Object.values(error.report.digests)).size, 2);
        return true;
      });
      const report = await syncPolicies([conn.client, second.client], PLANS, { prune: true });
      assert.equal(new Set(Object.values(report.digests)).size, 1);
      assert.deepEqual(report.changes.filter((c) => c.status === "deleted").map((c) => c.name), ["plan:local"]);
    } finally {
      await second.close();
      other.stop();
    }
  });

  it("the express-rate-limit store checks a policy", async () => {
    // The policy allows 1 where express-rate-limit's own limit says 2: the policy decides.
    await conn.raw("RL.POLICY", "SET", "plan:erl", "FIXEDWINDOW", "1", "1h");
    const app = express();
    app.use(expressRateLimit({ windowMs: 60_000, limit: 2, store: new RedisRatelimitStore({ redis: conn.client, policy: "plan:erl" }) }));
    app.get("/", (_req, res) => void res.send("hi"));
    const http = await listen(app);
    try {
      const replies = [];
      for (let i = 0; i < 3; i++) replies.push(await get(port(http), "/"));
      assert.deepEqual(replies.map((r) => r.status), [200, 429, 429]);
      assert.equal(await conn.raw("EXISTS", "rl:erl:127.0.0.1"), 1);
    } finally {
      await close(http);
    }
  });
});

it("docs/clients.md's Node block runs with the page's plans.json and prints what the page says", async () => {
  const page = readFileSync(join(PACKAGE, "../../docs/clients.md"), "utf8");
  const block = /<!-- node: [^\n]*-->\n```js\n([\s\S]*?)```/.exec(page)?.[1];
  const json = /<!-- file: plans\.json -->\n```json\n([\s\S]*?)```/.exec(page)?.[1];
  assert.ok(block !== undefined && json !== undefined, "the page has its node block and plans.json");
  assert.ok(block.includes("new Redis(6379)"));
  const fresh = await Server.start(); // no policies yet: the worker creates them
  const dir = mkdtempSync(join(tmpdir(), "rl-docs-"));
  const file = join(PACKAGE, "build", "docs-policies.mjs"); // inside the package: `import "redis-ratelimit"` is this one
  try {
    writeFileSync(join(dir, "plans.json"), json);
    writeFileSync(file, block.replace("new Redis(6379)", `new Redis(${fresh.port})`));
    const printed = await new Promise<string>((res, rej) => {
      const child = spawn(process.execPath, [file], { cwd: dir, stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.on("data", (c: Buffer) => (out += c.toString()));
      child.on("exit", (code) => (code === 0 ? res(out) : rej(new Error(`the block exited ${code}: ${out}`))));
    });
    const expected = [...block.matchAll(/\/\/ -> (.*)$/gm)].map((m) => m[1]);
    assert.deepEqual(printed.trimEnd().split("\n"), expected);
  } finally {
    rmSync(file, { force: true });
    rmSync(dir, { recursive: true, force: true });
    fresh.stop();
  }
});

describe("syncPolicies on a cluster", () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await Cluster.start();
  });
  after(() => cluster.stop());

  for (const kind of CLUSTER_KINDS) {
    it(`${kind}: applies to every primary, and their digests agree`, async () => {
      const conn = await connectCluster(kind, cluster.ports);
      try {
        for (const p of cluster.ports) {
          for (const pair of parseList(await rawCommand(p, "RL.POLICY", "LIST"))) await rawCommand(p, "RL.POLICY", "DEL", pair);
        }
        const report = await syncPolicies(conn.client, PLANS);
        assert.equal(Object.keys(report.digests).length, 3);
        assert.equal(new Set(Object.values(report.digests)).size, 1);
        assert.equal(report.changes.length, 9);
        for (const p of cluster.ports) {
          assert.deepEqual(parseList(await rawCommand(p, "RL.POLICY", "LIST")).sort(), Object.keys(PLANS).sort());
        }
        const limiter = new RateLimiter(conn.client);
        for (const user of ["user:1", "user:2", "user:3", "user:4"]) {
          const d = await limiter.check(user, new NamedPolicy("plan:pro"));
          assert.equal(d.allowed, true);
          assert.equal(d.tiers.length, 2);
        }
        const again = await syncPolicies(conn.client, PLANS);
        assert.ok(again.changes.every((c) => c.status === "unchanged"));
        await assert.rejects(syncPolicies(conn.client, { bad: "FIXEDWINDOW 0 1h" }), (error: unknown) => {
          assert.ok(error instanceof PolicySyncError);
          assert.equal(error.report.errors.length, 3); // refused by each primary
          return true;
        });
      } finally {
        await conn.close();
      }
    });
  }
});

/** The policy names in a raw RESP reply to `RL.POLICY LIST` (an array of [name, version]). */
function parseList(resp: string): string[] {
  const names: string[] = [];
  const lines = resp.split("\r\n");
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.startsWith("*2") && lines[i + 1]?.startsWith("$")) names.push(lines[i + 2]!);
  }
  return names;
}
