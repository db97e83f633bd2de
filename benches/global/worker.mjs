// One benchmark worker for Node (issue 33; the contract: one OS process
// sharing ONE global limit with the other workers through the Node client's
// GlobalLimit). Uses clients/node/dist (`npm run build` in clients/node).
//
//   node benches/global/worker.mjs --port P --key K --limit N --algorithm tokenbucket|fixedwindow
//        (--demand R | --saturate 1) --duration S [--max-lease S] --start-at T
//
// Paced open loop: request i is due at start + i / demand; when behind, the
// due requests are made at once, without sleeping. JavaScript has one
// thread, and the GlobalLimit's refills run on its timers: a worker that
// never gave the event loop a turn would never refill, so a catch-up gives
// it one (setImmediate, no sleep) after each millisecond of requests.
// With --saturate 1: a closed loop, blocks of checks back to back as fast as
// they go, the event loop given a turn (setImmediate) after each block.
// Prints one JSON line at the end, after close() has given back what was
// not spent.
import { createRequire } from "node:module";
import { setImmediate as turn } from "node:timers/promises";

const require = createRequire(new URL("../../clients/node/package.json", import.meta.url));
const { Redis } = require("ioredis");
const { FixedWindow, GlobalLimit, TokenBucket } = await import("../../clients/node/dist/esm/index.js");

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i];
    if (!name.startsWith("--") || argv[i + 1] === undefined) throw new Error(`expected --name value, got ${name}`);
    out[name.slice(2)] = argv[i + 1];
  }
  for (const need of ["port", "key", "limit", "algorithm", "duration", "start-at"]) {
    if (out[need] === undefined) throw new Error(`--${need} is required`);
  }
  if (!["tokenbucket", "fixedwindow"].includes(out.algorithm)) throw new Error("--algorithm is tokenbucket or fixedwindow");
  return {
    port: Number(out.port),
    key: out.key,
    limit: Number(out.limit),
    algorithm: out.algorithm,
    demand: Number(out.demand ?? 0),
    saturate: out.saturate === "1",
    duration: Number(out.duration),
    maxLease: Number(out["max-lease"] ?? 1.0),
    startAt: Number(out["start-at"]),
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const wallS = () => (performance.timeOrigin + performance.now()) / 1000;

const a = args();
const limit = a.algorithm === "tokenbucket" ? new TokenBucket(a.limit, a.limit) : new FixedWindow(a.limit, "1s");
const redis = new Redis({ port: a.port, host: "127.0.0.1" });
redis.on("error", () => undefined);
// Fail closed, as the Python worker: what is allowed is then only what was
// leased, so the overage measured is the lease's, never the fail mode's.
const gl = new GlobalLimit(redis, a.key, limit, { maxLease: Math.round(a.maxLease * 1000), failOpen: false });
await gl.started;

const seconds = Math.max(1, Math.ceil(a.duration));
const perSecond = new Array(seconds).fill(0);
let attempted = 0;
let allowed = 0;
let insideNs = 0n;
const periodS = 1 / a.demand;

const delay = a.startAt - wallS();
if (delay > 0) await sleep(delay * 1000);
const start = wallS();
const end = start + a.duration;
// n checks back to back, counted at `now`; then the GlobalLimit's timers get
// their turn of the event loop (no sleep).
async function checks(n, now) {
  let ok = 0;
  const before = process.hrtime.bigint();
  for (let i = 0; i < n; i++) if (gl.allow()) ok++;
  insideNs += process.hrtime.bigint() - before;
  attempted += n;
  allowed += ok;
  perSecond[Math.min(seconds - 1, Math.floor(now - start))] += ok;
  await turn();
}
// Checks between two reads of the clock and two turns of the event loop (--saturate).
const BLOCK = 4096;
while (a.saturate) {
  const now = wallS();
  if (now >= end) break;
  await checks(BLOCK, now);
}
while (!a.saturate) {
  const now = wallS();
  if (now >= end) break;
  // Every request due by now (at most a millisecond's worth at a time).
  const due = Math.min(Math.floor((now - start) / periodS) + 1, attempted + Math.max(1, Math.ceil(0.001 / periodS)));
  const n = due - attempted;
  if (n <= 0) {
    const wait = (start + attempted * periodS - now) * 1000;
    if (wait >= 1) await sleep(wait);
    else await turn();
    continue;
  }
  await checks(n, now);
}
await gl.close();
const stats = gl.stats();
redis.disconnect();
process.stdout.write(
  `${JSON.stringify({
    lang: "node",
    attempted,
    allowed,
    redis_calls: stats.calls,
    granted: stats.granted,
    refunded: stats.refunded,
    refunds_lost: stats.refundsLost,
    starved: stats.starved,
    failed_closed: stats.failedClosed,
    failed_open: stats.failedOpen,
    denied: stats.denied,
    local_ns_per_check: attempted > 0 ? Number(insideNs) / attempted : 0,
    allowed_per_second: perSecond,
  })}\n`,
);
