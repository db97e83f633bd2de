/**
 * Express (4 and 5) and any Connect-style framework: `app.use(rateLimit({ redis, limits }))`.
 * Typed structurally, so neither Express nor its types are needed.
 */
import { type RequestInfo, Rule, type RuleOptions } from "./rule.js";

/** What the middleware reads of Express's request. */
export interface ExpressRequestLike {
  method?: string | undefined;
  path?: string | undefined;
  url?: string | undefined;
  ip?: string | undefined;
  headers: Record<string, string | string[] | undefined>;
  socket?: { remoteAddress?: string | undefined } | undefined;
  app?: { get?(setting: string): unknown } | undefined;
}

/** What the middleware writes on Node's response. */
export interface ExpressResponseLike {
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  end(body?: string): unknown;
}

export type ExpressMiddleware = ((
  req: ExpressRequestLike,
  res: ExpressResponseLike,
  next: (error?: unknown) => void,
) => void) & {
  /** The rule behind the middleware (its breaker, `validate()`, `started`). */
  rule: Rule;
  /** Forgets an identity (`"ip:10.0.0.7"`) in Redis and in this process's denial cache: `rule.reset`. */
  reset(identity: string): Promise<void>;
};

export function expressRequest(req: ExpressRequestLike): RequestInfo {
  return {
    method: req.method ?? "",
    path: req.path ?? req.url ?? "",
    headers: req.headers,
    ip: req.ip ?? req.socket?.remoteAddress,
    raw: req,
    trustsEveryProxy: req.app?.get?.("trust proxy") === true,
  };
}

/**
 * The middleware: a denied request is answered `429 Too Many Requests` with
 * the headers and a one-line text body, and the app does not see it; an
 * allowed one goes on, its response carrying the headers. Every option is
 * checked here, when the app starts.
 */
export function rateLimit(options: RuleOptions): ExpressMiddleware {
  const rule = new Rule(options);
  const middleware = (req: ExpressRequestLike, res: ExpressResponseLike, next: (error?: unknown) => void): void => {
    rule.decide(expressRequest(req)).then(
      (verdict) => {
        for (const [name, value] of Object.entries(verdict.headers)) res.setHeader(name, value);
        if (verdict.action === "pass") {
          next();
          return;
        }
        res.statusCode = verdict.status;
        res.end(verdict.body);
      },
      (error: unknown) => next(error),
    );
  };
  return Object.assign(middleware, { rule, reset: (identity: string) => rule.reset(identity) });
}
