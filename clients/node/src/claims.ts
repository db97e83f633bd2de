/**
 * Which keys each rule, store and limiter writes, so that two of them that
 * would share counts without anyone asking are refused when the second is
 * built. Keys are claimed per Redis client object and, where the client's
 * options name the server (host and port, or socket path, and database;
 * not a cluster), per server: two client objects to one server collide too.
 *
 * The server check compares the addresses as written, so it never refuses
 * two different servers; it misses one server reached under two names
 * (`localhost` and `127.0.0.1`). A claim carries a signature (the limit and
 * its parameters): the same signature from another client object is the
 * same app built again (a test fixture, an app factory), which takes over
 * the keys; a different one is refused.
 */
import type { RedisAdapter } from "./adapter.js";

const byClient = new WeakMap<object, Map<string, string>>();
interface ServerClaim {
  signature: string;
  client: WeakRef<object>;
}
const byServer = new Map<string, Map<string, ServerClaim>>();

/** A scalar option as text; undefined for anything else. */
function word(value: unknown): string | undefined {
  return typeof value === "string" || typeof value === "number" ? String(value) : undefined;
}

/** `host:port/db` or `unix:path/db` of a single-server client, when its options say; undefined otherwise. */
export function serverOf(adapter: RedisAdapter): string | undefined {
  if (adapter.cluster) return undefined;
  const options = (adapter.client as { options?: Record<string, unknown> }).options;
  if (options === undefined || options === null || typeof options !== "object") return undefined;
  if (adapter.kind === "ioredis") {
    const path = word(options.path);
    const where = path !== undefined && path !== "" ? `unix:${path}` : `${word(options.host) ?? "localhost"}:${word(options.port) ?? "6379"}`;
    return `${where}/${word(options.db) ?? "0"}`;
  }
  if (adapter.kind === "node-redis") {
    const socket = (options.socket ?? {}) as Record<string, unknown>;
    let host = word(socket.host);
    let port = word(socket.port);
    let db = word(options.database);
    if (typeof options.url === "string") {
      try {
        const url = new URL(options.url);
        host = url.hostname || host;
        port = url.port || port;
        if (url.pathname.length > 1) db = url.pathname.slice(1);
      } catch {
        return undefined;
      }
    }
    const where = typeof socket.path === "string" ? `unix:${socket.path}` : `${host ?? "localhost"}:${port ?? "6379"}`;
    return `${where}/${db ?? "0"}`;
  }
  return undefined;
}

/**
 * Claims `patterns` (key patterns such as `rl:{*}:login:fixedwindow`) for
 * `adapter`'s client, or throws naming them and `fix`. `signature` tells a
 * rebuilt app from a different rule (see above); on one client object any
 * second claim is refused.
 */
export function claimKeys(adapter: RedisAdapter, patterns: readonly string[], signature: string, what: string, fix: string): void {
  let mine = byClient.get(adapter.client);
  if (mine === undefined) {
    mine = new Map();
    byClient.set(adapter.client, mine);
  }
  const taken = patterns.filter((p) => mine.has(p));
  if (taken.length > 0) {
    throw new Error(`another ${mine.get(taken[0]!) ?? what} on this Redis client already writes ${taken.join(", ")}: the two would share their counts. ${fix}`);
  }
  const server = serverOf(adapter);
  const there = server === undefined ? undefined : (byServer.get(server) ?? new Map<string, ServerClaim>());
  if (server !== undefined && there !== undefined) {
    const clash = patterns.filter((p) => {
      const c = there.get(p);
      return c !== undefined && c.client.deref() !== undefined && c.client.deref() !== adapter.client && c.signature !== signature;
    });
    if (clash.length > 0) {
      throw new Error(
        `another Redis client object to the same server (${server}) already writes ${clash.join(", ")} with other limits: ` +
          `the two would share their counts. ${fix}`,
      );
    }
    byServer.set(server, there);
  }
  for (const p of patterns) {
    mine.set(p, what);
    there?.set(p, { signature, client: new WeakRef(adapter.client) });
  }
}

/** Forgets every claim of `adapter`'s client (tests, hot reloads). */
export function forgetClaims(adapter: RedisAdapter): void {
  const mine = byClient.get(adapter.client);
  byClient.delete(adapter.client);
  const server = serverOf(adapter);
  if (mine === undefined || server === undefined) return;
  const there = byServer.get(server);
  for (const p of mine.keys()) if (there?.get(p)?.client.deref() === adapter.client) there.delete(p);
}
