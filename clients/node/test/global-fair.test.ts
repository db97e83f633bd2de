/**
 * The fair split's decisions (`FairSplit`), step by step and deterministic:
 * the times are given, the cadence's random part is fixed, and every grant
 * is a real `COST n UPTO` reply from a real redis-server (a token bucket
 * that does not refill during the test, filled back with `RL.REFUND` where
 * a step needs some).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import * as commands from "../src/commands.js";
import { FairSplit, subWindowEndMs } from "../src/global.js";
import { Guard } from "../src/guard.js";
import { GlobalLimit, SlidingCounter, TokenBucket } from "../src/index.js";
import { Server } from "./servers.js";

let server: Server;
let redis: Redis;
let guard: Guard;
before(async () => {
  server = await Server.start();
  redis = new Redis({ port: server.port, host: "127.0.0.1" });
  guard = new Guard(redis, { timeoutMs: 2000 });
});
after(() => {
  redis.disconnect();
  server.stop();
});

// 100 tokens, one more every 1,000 s: nothing refills while the test runs.
const bucket = new TokenBucket(100, 0.001);
const INTERVAL = 20;
/** 2 units a ms: one interval's demand is 40, a normal batch (two intervals) 80. */
const DEMAND = 2;

/** Asks Redis for `amount` and tells `fair` the reply came at `now` (asked at `now` too). */
async function ask(fair: FairSplit, key: string, amount: number, now: number): Promise<commands.Grant> {
  const grant = await guard.send(commands.upto(key, bucket, amount));
  fair.granted(now, amount, grant);
  return grant;
}

/** Puts `amount` back into the bucket (up to its capacity). */
async function refill(key: string, amount: number): Promise<void> {
  await guard.send(commands.refund(key, bucket, amount));
}

describe("FairSplit, the scarce mode's decisions", () => {
  it("becomes scarce on a short grant; leaves it only on a whole grant that left as much again at Redis; asks at interval x (1 + U)", async () => {
    const key = "fair:steps";
    const fair = new FairSplit(INTERVAL, 1000, () => 0.5);

    // Not scarce: a normal batch, two intervals of demand.
    assert.equal(fair.want(0, DEMAND, 0), 80);
    let g = await ask(fair, key, 80, 0);
    assert.deepEqual([g.granted, g.remaining], [80, 20]);
    assert.equal(fair.scarce, false, "a whole grant does not make it scarce");

    // Short: scarce, no ask before one interval after this one.
    assert.equal(fair.want(20, DEMAND, 0), 80);
    g = await ask(fair, key, 80, 20);
    assert.deepEqual([g.granted, g.remaining], [20, 0]);
    assert.equal(fair.scarce, true);
    assert.equal(fair.want(30, DEMAND, 0), 0, "scarce: never early because it ran dry");
    assert.equal(fair.waiting(30), true);

    // At its cadence: one interval of its own demand; the next ask 20 x (1 + 0.5) later.
    assert.equal(fair.want(40, DEMAND, 0), 40);
    assert.equal(fair.nextAsk, 70);
    await refill(key, 50);
    g = await ask(fair, key, 40, 40);
    assert.deepEqual([g.granted, g.remaining], [40, 10]);
    // Whole, but it left less than it asked: still scarce (refinement 1).
    assert.equal(fair.scarce, true, "a whole grant that (nearly) emptied the limit keeps it scarce");
    // And the cadence's random part holds the next ask back past one interval (refinement 2).
    assert.equal(fair.want(60, DEMAND, 0), 0, "no ask at one interval: the random part adds 0.5 interval");
    assert.equal(fair.want(69.9, DEMAND, 0), 0);

    // At 70: asks again; whole, and as much again left: out of scarcity.
    assert.equal(fair.want(70, DEMAND, 0), 40);
    assert.equal(fair.nextAsk, 100);
    await refill(key, 1000);
    g = await ask(fair, key, 40, 70);
    assert.deepEqual([g.granted, g.remaining], [40, 60]);
    assert.equal(fair.scarce, false);
    assert.equal(fair.waiting(71), false);
    // Normal again: asks as soon as less than one interval's demand is held, for two intervals' worth minus what is held.
    assert.equal(fair.want(71, DEMAND, 40), 0);
    assert.equal(fair.want(72, DEMAND, 39), 41);
  });

  it("a zero grant: no ask before the limit's retry-after, scarce or not", async () => {
    const key = "fair:zero";
    const fair = new FairSplit(INTERVAL, 1000, () => 0);
    await guard.send(commands.upto(key, bucket, 100)); // emptied by someone else
    assert.equal(fair.want(0, DEMAND, 0), 80);
    const g = await ask(fair, key, 80, 0);
    assert.equal(g.granted, 0);
    assert.ok(g.retryAfterMs > 900_000, String(g.retryAfterMs)); // one token per 1,000 s
    assert.equal(fair.scarce, true);
    assert.equal(fair.emptyUntil, g.retryAfterMs);
    // U = 0: the cadence alone would allow an ask at 20; the spent limit does not.
    assert.equal(fair.want(20, DEMAND, 0), 0);
    assert.equal(fair.want(g.retryAfterMs - 1, DEMAND, 0), 0);
    assert.equal(fair.waiting(g.retryAfterMs - 1), true);
    assert.equal(fair.want(g.retryAfterMs, DEMAND, 0), 40);
  });

  it("the cadence's random part spans [1, 2) intervals, one draw per ask", () => {
    const draws = [0, 0.25, 0.999];
    const fair = new FairSplit(INTERVAL, 1000, () => draws.shift()!);
    fair.granted(0, 10, { granted: 5, remaining: 0, retryAfterMs: 0 }); // short: scarce
    let now = fair.nextAsk;
    const gaps: number[] = [];
    for (let i = 0; i < 3; i++) {
      assert.ok(fair.want(now, DEMAND, 0) > 0);
      gaps.push(Math.round((fair.nextAsk - now) * 1000) / 1000);
      now = fair.nextAsk;
    }
    assert.deepEqual(gaps, [20, 25, 39.98]);
    // Whatever it returns, the next ask stays within [1, 2) intervals.
    for (const odd of [1, 5, -1, Number.NaN]) {
      const bad = new FairSplit(INTERVAL, 1000, () => odd);
      bad.granted(0, 10, { granted: 5, remaining: 0, retryAfterMs: 0 });
      assert.ok(bad.want(20, DEMAND, 0) > 0);
      assert.ok(bad.nextAsk >= 40 && bad.nextAsk < 60, `${odd}: ${bad.nextAsk}`);
    }
    assert.throws(() => new GlobalLimit(redis, "fair:x", bucket, { random: 0.5 as never }), /random must be a function/);
  });

  it("a sliding counter's sub-window end: aligned to the epoch, window / precision long, rounded up", () => {
    const limit = new SlidingCounter(1000, "1s", { precision: 4 });
    assert.equal(subWindowEndMs(limit, 1_000_000_000_000), 1_000_000_000_250);
    assert.equal(subWindowEndMs(limit, 1_000_000_000_249), 1_000_000_000_250);
    assert.equal(subWindowEndMs(new SlidingCounter(10, "1s", { precision: 3 }), 1_000_000_000_000), 1_000_000_000_334);
    assert.equal(subWindowEndMs(new SlidingCounter(10, "1m"), 61_000), 120_000);
  });
});
