/**
 * One process of global.test.ts: a GlobalLimit of its own on the shared key,
 * asked at a paced demand (each request at its scheduled time; when behind,
 * catching up without sleeping) from `startAt` for `seconds`. Prints one JSON
 * line: the wall time (ms) before and after each allowed request, and the
 * counters after close().
 */
import { Redis } from "ioredis";
import { FixedWindow, GlobalLimit, type Limit, TokenBucket } from "../src/index.js";
import { sleep } from "./servers.js";

export interface ChildArgs {
  port: number;
  key: string;
  limit: ["tokenbucket", number, number] | ["fixedwindow", number, string];
  demand: number;
  seconds: number;
  maxLeaseMs: number;
  startAt: number;
}

const wall = (): number => performance.timeOrigin + performance.now();

async function main(): Promise<void> {
  const args = JSON.parse(process.argv[2] ?? "") as ChildArgs;
  const limit: Limit = args.limit[0] === "tokenbucket" ? new TokenBucket(args.limit[1], args.limit[2]) : new FixedWindow(args.limit[1], args.limit[2]);
  const redis = new Redis({ port: args.port, host: "127.0.0.1" });
  const gl = new GlobalLimit(redis, args.key, limit, { maxLease: args.maxLeaseMs });
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
