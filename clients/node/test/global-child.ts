/**
 * One process of global.test.ts: a GlobalLimit of its own on the shared key,
 * asked at a paced demand (each request at its scheduled time; when behind,
 * catching up without sleeping) from `startAt` for `seconds`. Prints one JSON
 * line: the wall time (ms) before and after each allowed request, and the
 * counters after close().
 */
import { Redis } from "ioredis";
import { FixedWindow, GCRA, GlobalLimit, type GlobalLimitOptions, type Limit, SlidingCounter, TokenBucket } from "../src/index.js";
import { sleep } from "./servers.js";

export interface ChildArgs {
  port: number;
  key: string;
  limit:
    | ["tokenbucket", number, number]
    | ["fixedwindow", number, string]
    | ["gcra", number, number, string]
    | ["slidingcounter", number, string, number];
  demand: number;
  seconds: number;
  maxLeaseMs: number;
  startAt: number;
  /** GlobalLimit options beyond maxLease (interval, maxBatch...), when given. */
  options?: Omit<GlobalLimitOptions, "maxLease" | "logger" | "random">;
}

function limitOf(spec: ChildArgs["limit"]): Limit {
  switch (spec[0]) {
    case "tokenbucket":
      return new TokenBucket(spec[1], spec[2]);
    case "fixedwindow":
      return new FixedWindow(spec[1], spec[2]);
    case "gcra":
      return new GCRA(spec[1], spec[2], spec[3]);
    case "slidingcounter":
      return new SlidingCounter(spec[1], spec[2], { precision: spec[3] });
  }
}

const wall = (): number => performance.timeOrigin + performance.now();

async function main(): Promise<void> {
  const args = JSON.parse(process.argv[2] ?? "") as ChildArgs;
  const limit = limitOf(args.limit);
  const redis = new Redis({ port: args.port, host: "127.0.0.1" });
  const gl = new GlobalLimit(redis, args.key, limit, { ...args.options, maxLease: args.maxLeaseMs });
  await gl.started;
  const times: Array<[number, number]> = [];
  if (args.startAt > wall()) await sleep(args.startAt - wall());
  const start = wall();
  const end = start + args.seconds * 1000;
  const period = 1000 / args.demand;
  let attempted = 0;
  for (;;) {
    const now = wall();
    if (now >= end) break;
    const due = start + attempted * period;
    if (due > now) {
      await sleep(Math.max(1, due - now));
      continue;
    }
    const before = wall();
    const ok = gl.allow();
    attempted++;
    if (ok) times.push([before, wall()]);
  }
  await gl.close();
  process.stdout.write(`${JSON.stringify({ attempted, times, stats: gl.stats() })}\n`);
  redis.disconnect();
}

void main();
