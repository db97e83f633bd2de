/**
 * One small interface over the Redis clients: ioredis (`Redis`, `Cluster`)
 * and node-redis v4+ (`createClient`, `createCluster`). Each sends a
 * command's words, routed by its first key in a cluster, and says how long
 * the client waits for a reply (for BLOCK).
 */
import type { Arg } from "./limits.js";

export interface RedisAdapter {
  /** `ioredis`, `ioredis-cluster`, `node-redis` or `node-redis-cluster`. */
  readonly kind: string;
  readonly cluster: boolean;
  /** The client this adapter sends through (one circuit breaker per client). */
  readonly client: object;
  /** Sends `args` (the command's name first), routed by `key` in a cluster. */
  send(args: readonly Arg[], key: string | undefined): Promise<unknown>;
  /** Sends `args` to every primary (one server: to it); their replies in a list. */
  sendToPrimaries(args: readonly Arg[]): Promise<unknown[]>;
  /** How long the client waits for a reply before giving up (ms), if it does. */
  commandTimeoutMs(): number | undefined;
  /**
   * Each primary by its address, to send it commands one by one (`syncPolicies`:
   * what each primary answered). One server: itself. Optional for an adapter
   * of your own: without it, `syncPolicies` takes the adapter as one server.
   */
  primaries?(): Promise<PrimaryNode[]>;
}

/** One primary: its address, and how to send it a command. */
export interface PrimaryNode {
  name: string;
  send(args: readonly Arg[]): Promise<unknown>;
}

/** A Redis client this package can use: an ioredis or node-redis client, single or cluster, or an adapter. */
export type RedisLike = object;

// The shapes read from the clients: only what is used, so neither library's
// types are needed to build or to use this package.
interface IoredisLike {
  call(name: string, ...args: Arg[]): Promise<unknown>;
  options?: { commandTimeout?: number; redisOptions?: { commandTimeout?: number }; host?: string; port?: number; path?: string };
  isCluster?: boolean;
}
interface IoredisClusterLike extends IoredisLike {
  isCluster: true;
  sendCommand(command: unknown): Promise<unknown>;
  nodes(role?: string): IoredisLike[];
}
interface NodeRedisLike {
  sendCommand(...args: unknown[]): Promise<unknown>;
  options?: {
    socket?: { socketTimeout?: number; host?: string; port?: number; path?: string };
    commandOptions?: { timeout?: number };
    url?: string;
  };
}
interface NodeRedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  masters: unknown[];
  nodeClient(node: unknown): NodeRedisLike | Promise<NodeRedisLike>;
  options?: { defaults?: { socket?: { socketTimeout?: number }; commandOptions?: { timeout?: number } } };
}

function isAdapter(x: object): x is RedisAdapter {
  return "send" in x && "sendToPrimaries" in x && "commandTimeoutMs" in x;
}

const words = (args: readonly Arg[]): string[] => args.map(String);

/** The adapter for `client`: ioredis or node-redis, single server or cluster; an adapter as it is. */
export function adapt(client: RedisLike): RedisAdapter {
  if (client === null || typeof client !== "object") {
    throw new TypeError("expected a Redis client (ioredis or node-redis, single or cluster)");
  }
  if (isAdapter(client)) return client;
  const c = client as Record<string, unknown>;
  if (typeof c.call === "function" && c.isCluster === true) return ioredisCluster(client as IoredisClusterLike);
  if (typeof c.call === "function" && typeof c.sendCommand === "function") return ioredis(client as IoredisLike);
  if (typeof c.sendCommand === "function" && typeof c.nodeClient === "function" && "masters" in c) {
    return nodeRedisCluster(client as NodeRedisClusterLike);
  }
  if (typeof c.sendCommand === "function") return nodeRedis(client as NodeRedisLike);
  throw new TypeError(
    "expected a Redis client: an ioredis Redis or Cluster, or a node-redis client or cluster " +
      "(createClient / createCluster, v4 or later), or a RedisAdapter",
  );
}

function ioredis(client: IoredisLike): RedisAdapter {
  return {
    kind: "ioredis",
    cluster: false,
    client,
    send: (args) => client.call(String(args[0]), ...words(args.slice(1))),
    sendToPrimaries: async (args) => [await client.call(String(args[0]), ...words(args.slice(1)))],
    commandTimeoutMs: () => client.options?.commandTimeout,
    primaries: () => Promise.resolve([ioredisNode(client)]),
  };
}

function ioredisCluster(client: IoredisClusterLike): RedisAdapter {
  // ioredis routes only the commands it knows; an unknown one would go to a
  // random node and follow a MOVED. So the command `call` builds is given
  // its slot before it is sent: `call` runs on an object whose sendCommand
  // sets it, and inherits everything else from the cluster.
  const routed = (slot: number): IoredisLike =>
    Object.create(client, {
      sendCommand: {
        value: (command: { slot?: number }) => {
          command.slot = slot;
          return client.sendCommand(command);
        },
      },
    }) as IoredisLike;
  return {
    kind: "ioredis-cluster",
    cluster: true,
    client,
    send: (args, key) => {
      const target = key === undefined ? client : routed(keySlot(key));
      return target.call(String(args[0]), ...words(args.slice(1)));
    },
    sendToPrimaries: (args) =>
      Promise.all(client.nodes("master").map((node) => node.call(String(args[0]), ...words(args.slice(1))))),
    commandTimeoutMs: () => client.options?.redisOptions?.commandTimeout,
    primaries: () => Promise.resolve(client.nodes("master").map(ioredisNode)),
  };
}

function nodeRedis(client: NodeRedisLike): RedisAdapter {
  return {
    kind: "node-redis",
    cluster: false,
    client,
    send: (args) => client.sendCommand(words(args)),
    sendToPrimaries: async (args) => [await client.sendCommand(words(args))],
    commandTimeoutMs: () => timeoutOf(client.options),
    primaries: () => Promise.resolve([nodeRedisNode(client, undefined)]),
  };
}

function ioredisNode(node: IoredisLike): PrimaryNode {
  const o = node.options;
  return {
    name: o?.path ?? `${o?.host ?? "localhost"}:${o?.port ?? 6379}`,
    send: (args) => node.call(String(args[0]), ...words(args.slice(1))),
  };
}

function nodeRedisNode(node: NodeRedisLike, name: string | undefined): PrimaryNode {
  const s = node.options?.socket;
  return {
    name: name ?? s?.path ?? (s?.host !== undefined || s?.port !== undefined ? `${s.host ?? "localhost"}:${s.port ?? 6379}` : (node.options?.url ?? "server")),
    send: (args) => node.sendCommand(words(args)),
  };
}

function timeoutOf(
  options: { socket?: { socketTimeout?: number }; commandOptions?: { timeout?: number } } | undefined,
): number | undefined {
  const t = [options?.socket?.socketTimeout, options?.commandOptions?.timeout].filter(
    (x): x is number => typeof x === "number" && x > 0,
  );
  return t.length === 0 ? undefined : Math.min(...t);
}

function nodeRedisCluster(client: NodeRedisClusterLike): RedisAdapter {
  return {
    kind: "node-redis-cluster",
    cluster: true,
    client,
    send: (args, key) => client.sendCommand(key, false, words(args)),
    sendToPrimaries: (args) =>
      Promise.all(
        client.masters.map(async (master) => {
          const node = await client.nodeClient(master);
          return node.sendCommand(words(args));
        }),
      ),
    commandTimeoutMs: () => timeoutOf(client.options?.defaults),
    primaries: () =>
      Promise.all(
        client.masters.map(async (master) => {
          const m = master as { address?: string; host?: string; port?: number };
          return nodeRedisNode(await client.nodeClient(master), m.address ?? `${m.host ?? "?"}:${m.port ?? "?"}`);
        }),
      ),
  };
}

// CRC16/XMODEM, as Redis Cluster hashes keys to slots.
const CRC_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let j = 0; j < 8; j++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ (CRC_TABLE[((crc >> 8) ^ b) & 0xff] ?? 0);
  return crc;
}

/** The cluster slot of `key`: its hash tag's (`{...}`, when non-empty) or the whole key's. */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key);
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % 16384;
  }
  return crc16(bytes) % 16384;
}
