/** The Redis clients under test, each connected to a test server. */
import { Cluster as IoCluster, Redis as IoRedis } from "ioredis";
import { createClient, createCluster } from "redis";
import { createClient as createClient4, createCluster as createCluster4 } from "redis4";

export const KINDS = ["ioredis", "node-redis", "node-redis-v4"] as const;
export type Kind = (typeof KINDS)[number];

export interface Connected {
  client: object;
  /** A raw command, for setup and checks outside the package. */
  raw(...args: string[]): Promise<unknown>;
  close(): Promise<void>;
}

export async function connect(
  kind: Kind,
  port: number,
  options: { timeoutMs?: number; resp3?: boolean } = {},
): Promise<Connected> {
  if (kind === "ioredis") {
    const client = new IoRedis({
      port,
      host: "127.0.0.1",
      ...(options.timeoutMs !== undefined ? { commandTimeout: options.timeoutMs } : {}),
    });
    return {
      client,
      raw: (name, ...args) => client.call(name, ...args),
      close: () => Promise.resolve(client.disconnect()),
    };
  }
  if (kind === "node-redis") {
    const client = createClient({
      socket: { port, host: "127.0.0.1", ...(options.timeoutMs !== undefined ? { socketTimeout: options.timeoutMs } : {}) },
      ...(options.resp3 === true ? { RESP: 3 as const } : {}),
    });
    client.on("error", () => undefined);
    await client.connect();
    return { client, raw: (...args) => client.sendCommand(args), close: async () => void (await client.quit()) };
  }
  const client = createClient4({ socket: { port, host: "127.0.0.1" } });
  client.on("error", () => undefined);
  await client.connect();
  return { client, raw: (...args) => client.sendCommand(args), close: async () => void (await client.quit()) };
}

export const CLUSTER_KINDS = ["ioredis", "node-redis", "node-redis-v4"] as const;

export async function connectCluster(kind: Kind, ports: number[]): Promise<Connected> {
  if (kind === "ioredis") {
    const client = new IoCluster(ports.map((port) => ({ host: "127.0.0.1", port })));
    await new Promise<void>((res, rej) => {
      client.once("ready", () => res());
      client.once("error", rej);
    });
    return {
      client,
      raw: (name, ...args) => client.call(name, ...args),
      close: () => Promise.resolve(client.disconnect()),
    };
  }
  const rootNodes = ports.map((port) => ({ url: `redis://127.0.0.1:${port}` }));
  if (kind === "node-redis") {
    const client = createCluster({ rootNodes });
    client.on("error", () => undefined);
    await client.connect();
    return {
      client,
      raw: (...args) => client.sendCommand(args[1], false, args),
      close: async () => void (await client.close()),
    };
  }
  const client = createCluster4({ rootNodes });
  client.on("error", () => undefined);
  await client.connect();
  return {
    client,
    raw: (...args) => client.sendCommand(args[1], false, args),
    close: async () => void (await client.disconnect()),
  };
}
