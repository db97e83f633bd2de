/**
 * Fastify (4 and 5): `await app.register(fastifyRateLimit, { redis, limits })`.
 * The plugin is not encapsulated (like `fastify-plugin`), so it limits every
 * route of the instance it is registered on; register it inside a
 * `register` block to limit only that block's routes.
 */
import { type RequestInfo, Rule, type RuleOptions } from "./rule.js";

interface FastifyRequestLike {
  method: string;
  url: string;
  ip?: string | undefined;
  headers: Record<string, string | string[] | undefined>;
  routeOptions?: { url?: string | undefined } | undefined;
}

interface FastifyReplyLike {
  header(name: string, value: string): unknown;
  code(status: number): FastifyReplyLike;
  type(contentType: string): FastifyReplyLike;
  send(body: string): unknown;
}

interface FastifyLike {
  addHook(name: "onRequest", hook: (request: FastifyRequestLike, reply: FastifyReplyLike) => Promise<unknown>): unknown;
  decorate?(name: string, value: unknown): unknown;
  hasDecorator?(name: string): boolean;
}

/** The rules each Fastify instance has, for its `rateLimitReset`. */
const rulesOf = new WeakMap<object, Rule[]>();

export function fastifyRequest(request: FastifyRequestLike, trustsEveryProxy = false): RequestInfo {
  return { method: request.method, path: request.url, headers: request.headers, ip: request.ip, raw: request, trustsEveryProxy };
}

/**
 * Whether the instance was built with `trustProxy: true`. Fastify keeps its
 * options under a symbol of its own (described `fastify.options`), not in
 * `initialConfig`; false when they cannot be found.
 */
function trustsEveryProxy(fastify: object): boolean {
  // An encapsulated instance (inside a `register` block) inherits the root's options.
  for (let o: object | null = fastify; o !== null; o = Object.getPrototypeOf(o) as object | null) {
    const symbol = Object.getOwnPropertySymbols(o).find((s) => s.description === "fastify.options");
    if (symbol !== undefined) return ((o as Record<symbol, unknown>)[symbol] as { trustProxy?: unknown } | undefined)?.trustProxy === true;
  }
  return false;
}

/** The plugin. Its options are the Express middleware's (`RuleOptions`). */
export function fastifyRateLimit(fastify: FastifyLike, options: RuleOptions, done: (error?: Error) => void): void {
  let rule: Rule;
  try {
    rule = new Rule(options);
  } catch (error) {
    done(error as Error);
    return;
  }
  const trustsAll = trustsEveryProxy(fastify);
  // fastify.rateLimitReset(identity): every rule registered on this instance
  // forgets the identity, in Redis and in its denial cache (rule.reset).
  let rules = rulesOf.get(fastify);
  if (rules === undefined) {
    const mine: Rule[] = [];
    rules = mine;
    rulesOf.set(fastify, mine);
    if (fastify.hasDecorator?.("rateLimitReset") !== true) {
      fastify.decorate?.("rateLimitReset", async (identity: string) => {
        for (const r of mine) await r.reset(identity);
      });
    }
  }
  rules.push(rule);
  fastify.addHook("onRequest", async (request, reply) => {
    const verdict = await rule.decide(fastifyRequest(request, trustsAll));
    for (const [name, value] of Object.entries(verdict.headers)) {
      if (name !== "Content-Type") reply.header(name, value);
    }
    if (verdict.action === "respond") {
      return reply.code(verdict.status).type("text/plain; charset=utf-8").send(verdict.body);
    }
    return undefined;
  });
  // The start-up check: a wrong password, a server without the module, a
  // limit it refuses fail the registration (and so app.ready()); an outage
  // does not (the fail mode deals with it).
  void rule.started.then((error) => done(error));
}

// Not encapsulated (what fastify-plugin does), so the hook applies to the parent's routes.
Object.assign(fastifyRateLimit, {
  [Symbol.for("skip-override")]: true,
  [Symbol.for("fastify.display-name")]: "redis-ratelimit",
});
