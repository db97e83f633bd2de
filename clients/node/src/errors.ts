/**
 * Errors named after what went wrong. ioredis and node-redis each raise one
 * class for every error reply; these say which kind it was, with the
 * command's name in front of the server's words.
 */
import type { Decision } from "./decision.js";

/** The server refused a rate-limit command; nothing changed. */
export class RateLimitError extends Error {
  constructor(
    readonly command: string,
    /** The server's words, without the command's name. */
    readonly serverMessage: string,
    options?: { cause?: unknown },
  ) {
    super(`${command}: ${serverMessage}`, options);
    this.name = new.target.name;
  }
}

/** A parameter or option the module does not accept (`ERR <parameter> must be ...`, `ERR syntax error ...`). */
export class InvalidArgumentError extends RateLimitError {}

/**
 * `RL.CHECK` named a policy the server does not hold (never defined, or
 * deleted): `ERR no policy 'name'`; `policy` is its name. Never answered as allowed.
 */
export class PolicyNotFoundError extends InvalidArgumentError {
  constructor(
    command: string,
    serverMessage: string,
    readonly policy: string,
    options?: { cause?: unknown },
  ) {
    super(command, serverMessage, options);
  }
}

/** The key holds something else: a string, a list, or another algorithm's state (`WRONGTYPE`). */
export class WrongTypeError extends RateLimitError {}

/** The server does not know the command: the module is not loaded there. */
export class ModuleNotLoadedError extends RateLimitError {}

/** A request was denied, where the caller chose an exception (`hold`): `decision` says when to retry. */
export class RateLimitExceeded extends Error {
  constructor(readonly decision: Decision) {
    const retry = decision.retryAfterMs;
    super(`rate limit exceeded: retry ${retry === null ? "never" : `in ${retry} ms`}`);
    this.name = "RateLimitExceeded";
  }
}

/**
 * Redis refused the limiter for a reason no retry fixes: a wrong or missing
 * password (`NOAUTH`, `WRONGPASS`), an ACL user without the module's
 * commands (`NOPERM`), or a node-redis client that was never connected (or
 * was closed). A configuration error, not an outage: never failed open on.
 */
export class RedisConfigurationError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RedisConfigurationError";
  }
}

/**
 * A waiter (`BLOCK`) was unblocked by the server before its turn came
 * (`UNBLOCKED`: its primary failed over, or `CLIENT UNBLOCK ... ERROR`):
 * nothing was taken; ask again, on the new primary.
 */
export class WaitInterruptedError extends RateLimitError {}

/** The limiter gave up waiting for Redis (the middleware's own time budget). */
export class RedisTimeoutError extends Error {
  constructor(ms: number) {
    super(`Redis did not answer within ${ms} ms`);
    this.name = "RedisTimeoutError";
  }
}

/** The circuit breaker is open: Redis failed recently, so it is not asked until the cool-down ends. */
export class CircuitOpenError extends Error {
  constructor(cause: unknown) {
    super("rate limiter skipped Redis: it failed recently (circuit breaker open)", { cause });
    this.name = "CircuitOpenError";
  }
}

/** Whether `error` is an error reply from the server (ioredis's ReplyError, node-redis's ErrorReply). */
export function isErrorReply(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  // node-redis 5 has subclasses (SimpleError, BlobError) of its ErrorReply.
  for (let proto: unknown = Object.getPrototypeOf(error); proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    const name = (proto as { constructor?: { name?: string } }).constructor?.name;
    if (name === "ReplyError" || name === "ErrorReply") return true;
  }
  return false;
}

const CONFIGURATION_REPLY = /^(NOAUTH|WRONGPASS|NOPERM)\b/;

/**
 * Whether `error` is a configuration error: an authentication or
 * permission reply (also when a client hands it over as a connection
 * error), or node-redis's "client is closed" (never connected, or quit:
 * node-redis never reconnects such a client, so no retry helps).
 */
export function isConfigurationError(error: unknown): boolean {
  if (error instanceof RedisConfigurationError) return true;
  if (!(error instanceof Error) || error instanceof RateLimitError) return false;
  if (CONFIGURATION_REPLY.test(error.message.trim())) return true;
  return error.name === "ClientClosedError" || error.constructor.name === "ClientClosedError";
}

/**
 * Whether `error` means Redis cannot decide: it cannot be reached (refused,
 * closed, timed out), a cluster is in transition (`CLUSTERDOWN`, a slot
 * being migrated: `TRYAGAIN`, `MOVED`/`ASK` left over when the client's
 * redirections ran out, `MASTERDOWN`, `READONLY` during a failover), or it
 * is loading or at `maxmemory` and refuses a new key. These, and only
 * these, go to the fail-open/503 choice and open the breaker; a
 * configuration error (`isConfigurationError`) and any other error reply
 * (a bad limit, a WRONGTYPE key) are not outages.
 */
export function isUnreachable(error: unknown): boolean {
  if (error instanceof RateLimitError || isConfigurationError(error)) return false;
  if (!isErrorReply(error)) return true;
  return /^(CLUSTERDOWN|OOM|LOADING|MASTERDOWN|TRYAGAIN|READONLY|MOVED|ASK|BUSY)\b/.test(error.message.trim());
}

/** The exception to raise for an error reply to `command`. */
export function translate(error: unknown, command: string): unknown {
  if (error instanceof RateLimitError || error instanceof RedisConfigurationError) return error;
  if (isConfigurationError(error)) return configurationError(error, command);
  if (!isErrorReply(error) || isUnreachable(error)) return error;
  const message = error.message.trim();
  if (message.startsWith("WRONGTYPE")) return new WrongTypeError(command, message, { cause: error });
  if (message.startsWith("UNBLOCKED")) return new WaitInterruptedError(command, message, { cause: error });
  const text = message.replace(/^ERR /, "");
  if (/^unknown command/i.test(text)) {
    // Redis quotes the first arguments (the key, with the client's address
    // in it): left out, as this message may reach an HTTP client.
    const name = text.replace(/,\s*with args beginning with:[\s\S]*$/i, "");
    return new ModuleNotLoadedError(
      command,
      `${name} (is the redis-ratelimit module loaded on this server?)`,
      { cause: error },
    );
  }
  const named = /^no policy '(.*)'/.exec(text);
  if (named !== null) return new PolicyNotFoundError(command, text, named[1] ?? "", { cause: error });
  return new InvalidArgumentError(command, text, { cause: error });
}

function configurationError(error: unknown, command: string): RedisConfigurationError {
  const message = error instanceof Error ? error.message.trim() : String(error);
  const fix = /^NOPERM/.test(message)
    ? "the Redis user lacks a permission the limiter needs (the module's RL.* commands, and its keys)"
    : /^(NOAUTH|WRONGPASS)/.test(message)
      ? "the Redis client's password (or user) is wrong or missing"
      : "the node-redis client is not connected: call await client.connect() before the app serves requests";
  return new RedisConfigurationError(`${command}: ${message}: ${fix}`, { cause: error });
}
