// Requests per second of an Express "hello" app: without a limiter, with this
// package's middleware, and with express-rate-limit + rate-limit-redis (its
// Lua script), on the same Redis, in the same run.
//   npm run bench            (BENCH_SECONDS=5 BENCH_CONNECTIONS=32 BENCH_ROUNDS=3)
// Each app runs in its own process; the load comes from this one over
// keep-alive connections; rounds interleave the three apps, and the median
// round is reported. Every request is allowed (a limit far above the load),
// so each measures the cost of asking Redis, not of answering 429.
import { fork } from "node:child_process";
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { fileURLToPath } from "node:url";
import { Server, freePort, modulePath, rawCommand } from "../test/servers.js";

const VARIANTS = ["none", "redis-ratelimit", "express-rate-limit+rate-limit-redis"] as const;
type Variant = (typeof VARIANTS)[number];

async function serve(variant: Variant, redisPort: number, port: number): Promise<void> {
  const express = (await import("express")).default;
  const { Redis } = await import("ioredis");
  const app = express();
  const redis = new Redis({ port: redisPort, host: "127.0.0.1" });
  if (variant === "redis-ratelimit") {
    const { FixedWindow, rateLimit } = await import("redis-ratelimit");
    app.use(rateLimit({ redis, limits: new FixedWindow(1_000_000_000, "1h") }));
  } else if (variant === "express-rate-limit+rate-limit-redis") {
    const { rateLimit } = await import("express-rate-limit");
    const { RedisStore } = await import("rate-limit-redis");
    app.use(
      rateLimit({
        windowMs: 3_600_000,
        limit: 1_000_000_000,
        standardHeaders: "draft-8",
        store: new RedisStore({ sendCommand: (command: string, ...args: string[]) => redis.call(command, ...args) as never }),
      }),
    );
  }
  app.get("/", (_req, res) => {
    res.send("hello");
  });
  app.listen(port, "127.0.0.1", () => process.send?.("ready"));
}

/** CPU seconds (user + system) a process has used so far (Linux /proc). */
function processCpu(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

/** CPU seconds the Redis server has used so far (INFO cpu). */
async function redisCpu(port: number): Promise<number> {
  const info = await rawCommand(port, "INFO", "cpu");
  const get = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1]);
  return get("used_cpu_user") + get("used_cpu_sys");
}

interface Result {
  rps: number;
  appCpuUs: number;
  redisCpuUs: number;
}

async function load(port: number, seconds: number, connections: number): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  let done = 0;
  let failed = 0;
  const end = performance.now() + seconds * 1000;
  const one = (): Promise<void> =>
    new Promise((res) => {
      const req = request({ host: "127.0.0.1", port, path: "/", agent }, (r) => {
        if (r.statusCode !== 200) failed++;
        r.resume();
        r.on("end", () => res());
      });
      req.on("error", () => {
        failed++;
        res();
      });
      req.end();
    });
  const worker = async (): Promise<void> => {
    while (performance.now() < end) {
      await one();
      done++;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: connections }, worker));
  const elapsed = (performance.now() - start) / 1000;
  agent.destroy();
  if (failed > 0) throw new Error(`${failed} requests failed or were not 200`);
  lastCount = done;
  return done / elapsed;
}

let lastCount = 0;

async function main(): Promise<void> {
  const seconds = Number(process.env.BENCH_SECONDS ?? 5);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
  const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
  const redis = await Server.start();
  const results = new Map<Variant, Result[]>(VARIANTS.map((v) => [v, []]));
  try {
    for (let round = 0; round < rounds; round++) {
      for (const variant of VARIANTS) {
        const port = await freePort();
        const child = fork(fileURLToPath(import.meta.url), ["serve", variant, String(redis.port), String(port)]);
        await new Promise((res) => child.once("message", res));
        await load(port, 1, connections); // warm-up
        const app0 = processCpu(child.pid!);
        const redis0 = await redisCpu(redis.port);
        const rps = await load(port, seconds, connections);
        const appCpuUs = ((processCpu(child.pid!) - app0) / lastCount) * 1e6;
        const redisCpuUs = ((await redisCpu(redis.port)) - redis0) / lastCount * 1e6;
        results.get(variant)!.push({ rps, appCpuUs, redisCpuUs });
        child.kill();
      }
    }
  } finally {
    redis.stop();
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const base = median(results.get("none")!.map((r) => r.rps));
  console.log(`module ${modulePath()}, node ${process.version}, ${connections} connections, ${rounds} rounds of ${seconds} s`);
  console.log("| app | requests/s (median) | vs no limiter | app CPU µs/request | Redis CPU µs/request | requests/s of each round |");
  console.log("|---|---:|---:|---:|---:|---|");
  for (const variant of VARIANTS) {
    const xs = results.get(variant)!;
    const rps = median(xs.map((r) => r.rps));
    console.log(
      `| ${variant} | ${Math.round(rps)} | ${((rps / base) * 100).toFixed(0)}% | ${median(xs.map((r) => r.appCpuUs)).toFixed(0)} | ` +
        `${median(xs.map((r) => r.redisCpuUs)).toFixed(1)} | ${xs.map((r) => Math.round(r.rps)).join(", ")} |`,
    );
  }
}

if (process.argv[2] === "serve") {
  await serve(process.argv[3] as Variant, Number(process.argv[4]), Number(process.argv[5]));
} else {
  await main();
}
