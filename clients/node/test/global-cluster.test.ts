/**
 * A GlobalLimit over a three-primary Redis Cluster the test starts itself:
 * the primary that owns the key's slot serves every grant and takes every
 * refund, and a lease held while the slot moves to another primary goes
 * back to the new owner (the client follows the MOVED).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { GlobalLimit, RateLimiter, TokenBucket, keySlot } from "../src/index.js";
import { CLUSTER_KINDS, connectCluster } from "./clients.js";
import { Cluster, rawCommand, sleep } from "./servers.js";

let cluster: Cluster;
before(async () => {
  cluster = await Cluster.start();
});
after(() => cluster.stop());

// 10,000 tokens, one more every 1,000 s: what is left is exactly what was not spent.
const bucket = new TokenBucket(10_000, 0.001);

/** The port of the primary serving `key`'s slot: the one node that does not redirect it. */
async function owner(key: string): Promise<number> {
  for (const p of cluster.ports) if (!(await rawCommand(p, "EXISTS", key)).startsWith("-MOVED")) return p;
  throw new Error(`no node serves ${key}`);
}

/** How many times a node ran `command` (INFO commandstats) since its last CONFIG RESETSTAT. */
async function ran(port: number, command: string): Promise<number> {
  const info = await rawCommand(port, "INFO", "commandstats");
  const m = new RegExp(`cmdstat_${command.replace(".", "\\.")}:calls=(\\d+)`, "i").exec(info);
  return m ? Number(m[1]) : 0;
}

async function nodeId(port: number): Promise<string> {
  return (await rawCommand(port, "CLUSTER", "MYID")).split("\r\n")[1]!;
}

/** Spends `n` requests, one a ms, asking Redis on the request's path when nothing is held. */
async function spend(gl: GlobalLimit, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    assert.equal(await gl.allowAsync(), true, JSON.stringify(gl.stats()));
    await sleep(1);
  }
}

for (const kind of CLUSTER_KINDS) {
  describe(`GlobalLimit over a ${kind} cluster`, () => {
    it("the key's primary serves every grant and takes every refund; no other node sees it", async () => {
      const key = `g:{${kind}}:cluster`;
      const home = await owner(key);
      for (const p of cluster.ports) await rawCommand(p, "CONFIG", "RESETSTAT");
      const conn = await connectCluster(kind, cluster.ports);
      const gl = new GlobalLimit(conn.client, key, bucket, { maxLease: 5000, idle: 5000 });
      try {
        assert.equal(await gl.started, undefined);
        await spend(gl, 200);
        await gl.close();
        const s = gl.stats();
        assert.ok(s.calls >= 1 && s.refunded > 0, JSON.stringify(s)); // some was held, and went back
        assert.equal(s.refunded, s.granted - s.spent);
        assert.equal(s.refundsLost, 0);
        assert.equal((await new RateLimiter(conn.client).peek(key, bucket)).remaining, 10_000 - s.spent);
        assert.ok((await ran(home, "rl.tokenbucket")) >= s.calls);
        assert.ok((await ran(home, "rl.refund")) >= 1);
        for (const p of cluster.ports.filter((p) => p !== home)) {
          assert.equal(await ran(p, "rl.tokenbucket"), 0, `node ${p} was asked for a grant`);
          assert.equal(await ran(p, "rl.refund"), 0, `node ${p} was sent a refund`);
          assert.doesNotMatch(await rawCommand(p, "INFO", "errorstats"), /MOVED/);
        }
      } finally {
        await gl.close();
        await conn.close();
      }
    });
  });
}

for (const kind of ["ioredis", "node-redis"] as const) {
  it(`a lease held while its slot moves to another primary goes back to the new owner, across the MOVED (${kind})`, async () => {
    const key = `g:{${kind}:moving}`;
    const slot = String(keySlot(key));
    const from = await owner(key);
    const to = cluster.ports.find((p) => p !== from)!;
    const [fromId, toId] = [await nodeId(from), await nodeId(to)];
    const conn = await connectCluster(kind, cluster.ports);
    const gl = new GlobalLimit(conn.client, key, bucket, { maxLease: 10_000, idle: 10_000 });
    try {
      await spend(gl, 100);
      const held = gl.stats().held;
      assert.ok(held > 0, JSON.stringify(gl.stats()));
      // Reshard the slot, key and all, from `from` to `to` (what redis-cli --cluster reshard does).
      for (const p of cluster.ports) await rawCommand(p, "CONFIG", "RESETSTAT");
      assert.match(await rawCommand(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromId), /^\+OK/);
      assert.match(await rawCommand(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", toId), /^\+OK/);
      assert.match(await rawCommand(from, "MIGRATE", "127.0.0.1", String(to), key, "0", "5000"), /^\+OK/);
      for (const p of [to, from, ...cluster.ports.filter((p) => p !== from && p !== to)]) {
        assert.match(await rawCommand(p, "CLUSTER", "SETSLOT", slot, "NODE", toId), /^\+OK/);
      }
      assert.equal(await owner(key), to);
      // The lease is still spent here, then what is left goes back: to the new owner.
      for (let i = 0; i < 20; i++) gl.allow();
      await gl.close();
      const s = gl.stats();
      assert.equal(s.refundsLost, 0, JSON.stringify(s));
      assert.ok(s.refunded > 0, JSON.stringify(s));
      assert.equal(s.refunded, s.granted - s.spent, JSON.stringify(s));
      assert.equal((await new RateLimiter(conn.client).peek(key, bucket)).remaining, 10_000 - s.spent);
      assert.ok((await ran(to, "rl.refund")) >= 1, "the refund reached the new owner");
      assert.equal(await ran(from, "rl.refund"), 0, "the old owner redirected it");
      assert.match(await rawCommand(from, "INFO", "errorstats"), /MOVED/);
    } finally {
      await gl.close();
      await conn.close();
    }
  });
}
