// What a Redis outage costs a request through each door (the middleware's
// rule, the express-rate-limit store's increment, consume()): refused
// connections and a hung server (SIGSTOP), ioredis and node-redis with
// their default options; the first request, then p50 and p99 of the next
// 100, and how long after the server is back the rule limits again.
//   npm run bench:outage
import { Redis } from "ioredis";
import { createClient } from "redis";
import { FixedWindow, RateLimiterRedis, RedisRatelimitStore, type RequestInfo, Rule } from "../src/index.js";
import { Server, freePort, sleep } from "../test/servers.js";

const request: RequestInfo = { method: "GET", path: "/", headers: {}, ip: "1.2.3.4", raw: null };
const logger = { warn: () => undefined, info: () => undefined };
const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function measure(name: string, rule: Rule): Promise<void> {
  await measureCall(`${name} | middleware`, () => rule.decide(request));
}

async function measureCall(name: string, call: () => Promise<unknown>): Promise<void> {
  const times: number[] = [];
  for (let i = 0; i < 101; i++) {
    const t = performance.now();
    await call().catch(() => undefined);
    times.push(performance.now() - t);
  }
  const first = times.shift()!;
  console.log(
    `| ${name} | ${first.toFixed(0)} ms | ${(pct(times, 50) * 1000).toFixed(0)} µs | ${(pct(times, 99) * 1000).toFixed(0)} µs |`,
  );
}

type Client = { kind: "ioredis"; c: Redis } | { kind: "node-redis"; c: ReturnType<typeof createClient> };

async function open(kind: "ioredis" | "node-redis", port: number, wait: boolean): Promise<Client> {
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

/**
 * The store and consume(), each on its own client (and, hung, its own
 * server), so each meets the outage itself: `refused` a port nobody
 * listens on, else a server stopped with SIGSTOP after one good call.
 */
async function doors(kind: "ioredis" | "node-redis", refused: boolean): Promise<void> {
  for (const door of ["store", "consume"] as const) {
    const server = refused ? undefined : await Server.start();
    const client = await open(kind, server?.port ?? (await freePort()), !refused);
    let call: () => Promise<unknown>;
    if (door === "store") {
      const store = new RedisRatelimitStore({ redis: client.c, prefix: `bench:${kind}:` });
      store.init({ windowMs: 60_000, limit: 1_000_000 });
      call = () => store.increment("k");
    } else {
      const limiter = new RateLimiterRedis({ storeClient: client.c, points: 1_000_000, duration: 60, keyPrefix: `bench-${kind}` });
      call = () => limiter.consume("k");
    }
    if (server !== undefined) {
      await call();
      server.process.kill("SIGSTOP");
    }
    await measureCall(`${refused ? "refused" : "hung (SIGSTOP)"} | ${kind} | ${door}`, call);
    server?.process.kill("SIGCONT");
    shut(client);
    server?.stop();
  }
}

console.log("| Redis | client | door | first request | then p50 | then p99 |");
console.log("|---|---|---|---:|---:|---:|");
const recovery: string[] = [];
for (const kind of ["ioredis", "node-redis"] as const) {
  const client = await open(kind, await freePort(), false);
  await measure(`refused | ${kind}`, new Rule({ redis: client.c, limits: new FixedWindow(5, "1m"), logger }));
  shut(client);
}
for (const kind of ["ioredis", "node-redis"] as const) {
  const server = await Server.start();
  const client = await open(kind, server.port, true);
  const rule = new Rule({ redis: client.c, limits: new FixedWindow(1_000_000, "1m"), logger });
  await rule.decide(request);
  server.process.kill("SIGSTOP");
  await measure(`hung (SIGSTOP) | ${kind}`, rule);
  server.process.kill("SIGCONT");
  const back = performance.now();
  while (Object.keys((await rule.decide(request)).headers).length === 0) await sleep(10);
  recovery.push(`${kind}: limiting again ${(performance.now() - back).toFixed(0)} ms after SIGCONT`);
  shut(client);
  server.stop();
}
for (const refused of [true, false]) {
  for (const kind of ["ioredis", "node-redis"] as const) await doors(kind, refused);
}
console.log(`\n${recovery.join("; ")} (the cool-down is 2000 ms)`);
process.exit(0);
