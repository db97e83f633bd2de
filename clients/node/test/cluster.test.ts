/** The adapters over a three-primary Redis Cluster the test starts itself. */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  CircuitOpenError,
  FixedWindow,
  RateLimiter,
  RateLimiterRedis,
  RedisRatelimitStore,
  Rule,
  TokenBucket,
  isUnreachable,
  keySlot,
} from "../src/index.js";
import { CLUSTER_KINDS, type Connected, connectCluster } from "./clients.js";
import { Cluster, rawCommand } from "./servers.js";

let cluster: Cluster;
before(async () => {
  cluster = await Cluster.start();
});
after(() => cluster.stop());

it("keySlot agrees with CLUSTER KEYSLOT", async () => {
  for (const key of ["a", "user:42", "{user:42}:s", "x{}y", "{}{a}", "rl:{ip:10.0.0.7}:tokenbucket", "é"]) {
    const reply = await rawCommand(cluster.ports[0]!, "CLUSTER", "KEYSLOT", key);
    assert.equal(`:${keySlot(key)}\r\n`, reply, key);
  }
});

for (const kind of CLUSTER_KINDS) {
  describe(`RateLimiter over a ${kind} cluster`, () => {
    let conn: Connected;
    let limiter: RateLimiter;
    before(async () => {
      conn = await connectCluster(kind, cluster.ports);
      limiter = new RateLimiter(conn.client);
    });
    after(() => conn.close());

    it("routes each key to its primary, without redirections", async () => {
      assert.equal(limiter.adapter.cluster, true);
      for (const p of cluster.ports) await rawCommand(p, "CONFIG", "RESETSTAT");
      const keys = Array.from({ length: 12 }, (_, i) => `${kind}:route:${i}`);
      for (const key of keys) {
        assert.equal((await limiter.fixedWindow(key, 1, "1m")).allowed, true);
        assert.equal((await limiter.fixedWindow(key, 1, "1m")).allowed, false);
        assert.equal((await limiter.info(key))?.algorithm, "fixedwindow");
      }
      // every primary served some (twelve keys over three primaries)
      const served = await Promise.all(cluster.ports.map((p) => rawCommand(p, "DBSIZE")));
      assert.ok(served.every((r) => r !== ":0\r\n"), served.join(" "));
      // and none was sent to the wrong primary first
      for (const p of cluster.ports) assert.doesNotMatch(await rawCommand(p, "INFO", "errorstats"), /MOVED/);
    });

    it("RL.ALL with one hash tag, and CROSSSLOT without", async () => {
      const d = await limiter.checkAll([
        [`{${kind}:u}:s`, new TokenBucket(2, 1)],
        [`{${kind}:u}:m`, new FixedWindow(5, "1m")],
      ]);
      assert.equal(d.tiers.length, 2);
      let a = "a";
      let b = "b";
      for (let i = 0; keySlot(a) === keySlot(b); i++) b = `b${i}`;
      a = `${kind}:${a}`;
      b = `${kind}:${b}`;
      await assert.rejects(
        limiter.checkAll([
          [a, new TokenBucket(2, 1)],
          [b, new TokenBucket(2, 1)],
        ]),
        /CROSSSLOT|slot/i,
      );
    });

    it("leases and hold", async () => {
      const out = await limiter.hold(`${kind}:jobs`, 1, "10s", async () => (await limiter.acquire(`${kind}:jobs`, 1, "10s")).allowed);
      assert.equal(out, false);
      assert.equal((await limiter.acquire(`${kind}:jobs`, 1, "10s")).allowed, true);
    });

    it("RL.TOP merges every primary's list", async () => {
      await limiter.topReset();
      const keys = Array.from({ length: 6 }, (_, i) => `${kind}:top:${i}`);
      for (const [i, key] of keys.entries()) {
        for (let n = 0; n <= i + 1; n++) await limiter.fixedWindow(key, 1, "1m");
      }
      const slots = new Set(keys.map((k) => keySlot(k)));
      assert.ok(slots.size > 1);
      const top = await limiter.top(10);
      assert.deepEqual(
        top.map((e) => [e.key, e.count]),
        keys.map((k, i) => [k, i + 1]).reverse(),
      );
      await limiter.topReset();
      assert.deepEqual(await limiter.top(), []);
    });
  });
}

describe("a rule of several identities on a cluster", () => {
  it("checks one slot after the other, in the rule's order, stopping at a denial", async () => {
    const conn = await connectCluster("ioredis", cluster.ports);
    try {
      const rule = new Rule({
        redis: conn.client,
        limits: [
          { limit: new FixedWindow(2, "1m", { name: "per-key" }), key: (r) => `key:${String(r.headers["x-api-key"])}` },
          { limit: new FixedWindow(5, "1m", { name: "per-ip" }), key: (r) => `ip:${r.ip}` },
        ],
        denialCache: false,
      });
      const request = (ip: string) => ({ method: "GET", path: "/", headers: { "x-api-key": "A" }, ip, raw: null });
      assert.notEqual(keySlot("rl:{key:A}:per-key"), keySlot("rl:{ip:10.0.0.1}:per-ip"));
      const verdicts = [];
      for (let i = 0; i < 3; i++) verdicts.push(await rule.decide(request("10.0.0.1")));
      assert.deepEqual(
        verdicts.map((v) => v.action),
        ["pass", "pass", "respond"],
      );
      assert.equal(verdicts[2]!.decision?.tiers.length, 1, "the per-IP slot was not asked");
      const limiter = new RateLimiter(conn.client);
      assert.equal((await limiter.info("rl:{ip:10.0.0.1}:per-ip"))?.remaining, 3, "the denied request spent nothing");
      assert.equal(verdicts[0]!.decision?.tiers.length, 2);
      assert.equal(verdicts[0]!.headers["RateLimit-Policy"], '"per-key";q=2;w=60, "per-ip";q=5;w=60');
    } finally {
      await conn.close();
    }
  });
});

describe("a cluster in transition is an outage (issue 30 item 16)", () => {
  /** The port of the primary serving `slot`: the one node that does not redirect a key of it. */
  async function owner(key: string): Promise<number> {
    for (const p of cluster.ports) if (!(await rawCommand(p, "GET", key)).startsWith("-MOVED")) return p;
    throw new Error(`no node serves ${key}`);
  }

  it("a MOVED/ASK loop (a slot marked migrating to a node that does not import it): fail mode, breaker open, in every door", async () => {
    const key = "rl:{ip:10.7.7.7}:mig:fixedwindow";
    const slot = String(keySlot(key));
    const from = await owner(key);
    const to = cluster.ports.find((p) => p !== from)!;
    const toId = (await rawCommand(to, "CLUSTER", "MYID")).split("\r\n")[1]!;
    const conn = await connectCluster("node-redis", cluster.ports);
    const other = await connectCluster("ioredis", cluster.ports);
    assert.match(await rawCommand(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", toId), /^\+OK/);
    try {
      const rule = new Rule({ redis: conn.client, limits: new FixedWindow(5, "1m"), scope: "mig", logger: { warn: () => undefined } });
      const request = { method: "GET", path: "/", headers: {}, ip: "10.7.7.7", raw: null };
      const verdict = await rule.decide(request);
      assert.equal(verdict.action, "pass", "failed open, not a 500");
      assert.equal(rule.breaker.open, true, "the breaker counted it");
      const store = new RedisRatelimitStore({ redis: other.client, prefix: "rl:{ip:10.7.7.7}:erl:", timeoutMs: 1000 });
      store.init({ windowMs: 60_000, limit: 5 });
      await assert.rejects(store.increment("k"), (e: unknown) => isUnreachable(e));
      await assert.rejects(store.increment("k"), CircuitOpenError);
      const flexible = new RateLimiterRedis({ storeClient: conn.client, keyPrefix: "rl:{ip:10.7.7.7}:flx", points: 5, duration: 60 });
      await assert.rejects(flexible.consume("k"), CircuitOpenError);
    } finally {
      await rawCommand(from, "CLUSTER", "SETSLOT", slot, "STABLE");
      await conn.close();
      await other.close();
    }
  });
});
