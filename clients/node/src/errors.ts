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

/**
 * Whether `error` means Redis cannot decide: it cannot be reached (refused,
 * closed, timed out, cluster down) or is at `maxmemory` and refuses a new
 * key. These, and only these, go to the middleware's fail-open/503 choice;
 * any other error reply (a bad limit, a WRONGTYPE key) is a bug to see.
 */
export function isUnreachable(error: unknown): boolean {
  if (error instanceof RateLimitError) return false;
  if (!isErrorReply(error)) return true;
  return /^(CLUSTERDOWN|OOM|LOADING|MASTERDOWN|TRYAGAIN|READONLY)\b/.test(error.message);
}

/** The exception to raise for an error reply to `command`. */
export function translate(error: unknown, command: string): unknown {
  if (!isErrorReply(error) || isUnreachable(error)) return error;
  const message = error.message.trim();
  if (message.startsWith("WRONGTYPE")) return new WrongTypeError(command, message, { cause: error });
  const text = message.replace(/^ERR /, "");
  if (/^unknown command/i.test(text)) {
    return new ModuleNotLoadedError(
      command,
      `${text} (is the redis-ratelimit module loaded on this server?)`,
      { cause: error },
    );
  }
  return new InvalidArgumentError(command, text, { cause: error });
}
