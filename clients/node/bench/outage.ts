// What a Redis outage costs a call through each door (the middleware's
// rule, the express-rate-limit store's increment, consume()), ioredis and
// node-redis with their default options, each door on a client and server
// of its own:
// - refused: a loopback port nobody has listened on;
// - stopped: a server killed (SIGKILL) after one good call, its port then
//   refusing connections;
// - hung: a server stopped with SIGSTOP after one good call.
// The first call, then p50 and p99 of the next 100; and how long after a
// hung server resumes the middleware limits again.
//   npm run bench:outage
import { Redis } from "ioredis";
import { createClient } from "redis";
import { FixedWindow, RateLimiterRedis, RedisRatelimitStore, type RequestInfo, Rule } from "../src/index.js";
import { Server, freePort, sleep } from "../test/servers.js";

const request: RequestInfo = { method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null };
const logger = { warn: () => undefined, info: () => undefined };
const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

type Kind = "ioredis" | "node-redis";
type Door = "middleware" | "store" | "consume";
type How = "refused" | "stopped" | "hung";
type Client = { kind: "ioredis"; c: Redis } | { kind: "node-redis"; c: ReturnType<typeof createClient> };

async function open(kind: Kind, port: number, wait: boolean): Promise<Client> {
  if (kind === "ioredis") {
    const c = new Redis({ port, host: "127.0.0.1" });
    c.on("error", () => undefined);
    return { kind, c };
  }
  const c = createClient({ socket: { port, host: "127.0.0.1" } });
  c.on("error", () => undefined);
  const connecting = c.connect();
  if (wait) await connecting;
  else connecting.catch(() => undefined);
  return { kind, c };
}

function shut(client: Client): void {
  if (client.kind === "ioredis") client.c.disconnect();
  else void client.c.disconnect().catch(() => undefined);
}

function doorCall(door: Door, client: Client): { call: () => Promise<unknown>; limiting: () => Promise<boolean> } {
  if (door === "middleware") {
    const rule = new Rule({ redis: client.c, limits: new FixedWindow(1_000_000, "1m"), logger });
    return {
      call: () => rule.decide(request),
      limiting: async () => Object.keys((await rule.decide(request)).headers).length > 0,
    };
  }
  if (door === "store") {
    const store = new RedisRatelimitStore({ redis: client.c, prefix: "bench:erl:", logger });
    store.init({ windowMs: 60_000, limit: 1_000_000 });
    return { call: () => store.increment("k"), limiting: () => store.increment("k").then(() => true, () => false) };
  }
  const limiter = new RateLimiterRedis({ storeClient: client.c, points: 1_000_000, duration: 60, keyPrefix: "bench-flx", logger });
  return { call: () => limiter.consume("k"), limiting: () => limiter.consume("k").then(() => true, () => false) };
}

async function scenario(kind: Kind, door: Door, how: How): Promise<string | undefined> {
  const server = how === "refused" ? undefined : await Server.start();
  const client = await open(kind, server?.port ?? (await freePort()), server !== undefined);
  const { call, limiting } = doorCall(door, client);
  if (server !== undefined) {
    await call();
    if (how === "stopped") server.process.kill("SIGKILL");
    else server.process.kill("SIGSTOP");
  }
  const times: number[] = [];
  for (let i = 0; i < 101; i++) {
    const t = performance.now();
    await call().catch(() => undefined);
    times.push(performance.now() - t);
  }
  const first = times.shift()!;
  console.log(
    `| ${how} | ${kind} | ${door} | ${first.toFixed(0)} ms | ${(pct(times, 50) * 1000).toFixed(0)} µs | ${(pct(times, 99) * 1000).toFixed(0)} µs |`,
  );
  let recovery: string | undefined;
  if (how === "hung" && door === "middleware" && server !== undefined) {
    server.process.kill("SIGCONT");
    const back = performance.now();
    while (!(await limiting())) await sleep(10);
    recovery = `${kind}: limiting again ${(performance.now() - back).toFixed(0)} ms after SIGCONT`;
  } else if (how === "hung") {
    server?.process.kill("SIGCONT");
  }
  shut(client);
  server?.stop();
  return recovery;
}

console.log("| Redis | client | door | first call | then p50 | then p99 |");
console.log("|---|---|---|---:|---:|---:|");
const recovery: string[] = [];
for (const how of ["refused", "stopped", "hung"] as const) {
  for (const kind of ["ioredis", "node-redis"] as const) {
    for (const door of ["middleware", "store", "consume"] as const) {
      const r = await scenario(kind, door, how);
      if (r !== undefined) recovery.push(r);
    }
  }
}
console.log(`\n${recovery.join("; ")} (the cool-down is 2000 ms)`);
process.exit(0);
