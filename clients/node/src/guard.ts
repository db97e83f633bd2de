/**
 * What every door (the middleware, the express-rate-limit store,
 * `consume()`) does around a command: a time budget, the circuit breaker of
 * its Redis client, and the sorting of failures into outages (the fail mode
 * applies), configuration errors (never failed open on) and bugs; and the
 * start-up check that finds a configuration error before the first request.
 */
import { type RedisAdapter, type RedisLike, adapt } from "./adapter.js";
import type { Command } from "./commands.js";
import {
  CircuitOpenError,
  InvalidArgumentError,
  ModuleNotLoadedError,
  RedisConfigurationError,
  RedisTimeoutError,
  isUnreachable,
  translate,
} from "./errors.js";
import { integer } from "./units.js";

/** The circuit breaker of one Redis client, shared by every rule, store and limiter on it. */
export class CircuitBreaker {
  private openUntil = 0;
  private probing = false;
  lastError: unknown;

  constructor(readonly cooldownMs: number) {}

  /** Whether a request may ask Redis now: closed, or the one probe after the cool-down. */
  allow(now: number): boolean {
    if (this.openUntil === 0) return true;
    if (now < this.openUntil || this.probing) return false;
    this.probing = true;
    return true;
  }

  success(): void {
    this.openUntil = 0;
    this.probing = false;
  }

  failure(error: unknown, now: number): void {
    this.lastError = error;
    this.openUntil = now + this.cooldownMs;
    this.probing = false;
  }

  get open(): boolean {
    return this.openUntil !== 0;
  }
}

const breakers = new WeakMap<object, CircuitBreaker>();

/**
 * The last authentication error each client reported on its `error`
 * events. A client whose password is refused while it connects (node-redis
 * reconnecting forever, ioredis 6) holds its commands until they time out:
 * without this, a wrong password would read as an outage and fail open.
 */
const authFailures = new WeakMap<object, { error: Error | undefined }>();

function watchAuth(client: object, kind: string): { error: Error | undefined } {
  let seen = authFailures.get(client);
  if (seen !== undefined) return seen;
  const state: { error: Error | undefined } = { error: undefined };
  authFailures.set(client, state);
  seen = state;
  const emitter = client as {
    on?: (event: string, fn: (error: unknown) => void) => unknown;
    listenerCount?: (event: string) => number;
  };
  if (typeof emitter.on !== "function") return seen;
  const listener = (error: unknown): void => {
    if (error instanceof Error && /^(NOAUTH|WRONGPASS|NOPERM)\b/.test(error.message.trim())) state.error = error;
    // The only listener: what the client does with an error nobody listens
    // to, node-redis throwing it, ioredis printing it.
    if (emitter.listenerCount?.("error") === 1) {
      if (kind.startsWith("node-redis")) throw error;
      console.error("redis-ratelimit: the Redis client reported an error, and the app listens to none:", error);
    }
  };
  emitter.on.call(client, "error", listener);
  return seen;
}

/** Where warnings and errors go (default `console`). */
export interface Logger {
  warn(message: string): void;
  info?(message: string): void;
  /** Configuration errors; `warn` when absent. */
  error?(message: string): void;
}

export interface GuardOptions {
  /** The most a command waits for Redis (ms, default 200), whatever the client's own timeouts. */
  timeoutMs?: number | undefined;
  /** After an outage, how long commands skip Redis before one probes it (ms, default 2000). */
  cooldownMs?: number | undefined;
}

/** Commands to one Redis client, each within a time budget, through the client's breaker. */
export class Guard {
  readonly adapter: RedisAdapter;
  readonly breaker: CircuitBreaker;
  readonly timeoutMs: number;
  private readonly auth: { error: Error | undefined };

  constructor(redis: RedisLike, options: GuardOptions = {}) {
    this.adapter = adapt(redis);
    this.auth = watchAuth(this.adapter.client, this.adapter.kind);
    this.timeoutMs = integer(options.timeoutMs ?? 200, "timeoutMs");
    const cooldown = integer(options.cooldownMs ?? 2000, "cooldownMs");
    let breaker = breakers.get(this.adapter.client);
    if (breaker === undefined) {
      breaker = new CircuitBreaker(cooldown);
      breakers.set(this.adapter.client, breaker);
    }
    this.breaker = breaker;
  }

  /**
   * Sends `command` within `timeoutMs`. Throws the outage as it came
   * (`RedisTimeoutError`, `CircuitOpenError`, the client's connection error,
   * a cluster in transition: `isUnreachable` says yes), a
   * `RedisConfigurationError`, or the error reply as `errors` names it.
   */
  async send<T>(command: Command<T>, timeoutMs = this.timeoutMs): Promise<T> {
    if (!this.breaker.allow(performance.now())) throw new CircuitOpenError(this.breaker.lastError);
    const sent = this.adapter.send([command.name, ...command.args], command.keys[0]);
    sent.catch(() => undefined); // answered after the budget: nobody waits for it any more
    let timer: NodeJS.Timeout | undefined;
    const budget = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new RedisTimeoutError(timeoutMs)), timeoutMs);
    });
    try {
      const reply = await Promise.race([sent, budget]);
      this.breaker.success();
      this.auth.error = undefined;
      return command.parse(reply);
    } catch (error) {
      if (this.auth.error !== undefined && isUnreachable(error) && !(error instanceof CircuitOpenError)) {
        // Not an outage: the client cannot log in, and waits for nothing.
        throw translate(this.auth.error, command.name);
      }
      if (isUnreachable(error)) {
        this.breaker.failure(error, performance.now());
        throw error;
      }
      this.breaker.success(); // an error reply: Redis is there
      throw translate(error, command.name);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The start-up check: sends `commands` (peeks, which change nothing) and
   * returns the configuration error it meets, if any: a wrong password, a
   * missing permission, a client never connected, a server without the
   * module, a limit the server refuses. An outage is not one (the fail mode
   * deals with it when requests come): undefined then, as when all is well.
   * A node-redis client not connected yet is given `connectWithinMs` to be.
   */
  async startupError(commands: ReadonlyArray<Command<unknown>>, connectWithinMs = 5000): Promise<Error | undefined> {
    await whenOpen(this.adapter.client, connectWithinMs);
    try {
      for (const command of commands) await this.send(command, Math.max(this.timeoutMs, 2000));
    } catch (error) {
      if (isStartupError(error)) return error;
    }
    return undefined;
  }
}

/** The errors a start-up check reports: configuration errors, and a server that refuses the limit or lacks the module. */
export function isStartupError(error: unknown): error is Error {
  return (
    error instanceof RedisConfigurationError ||
    error instanceof ModuleNotLoadedError ||
    error instanceof InvalidArgumentError
  );
}

/** Waits (at most `ms`) for a node-redis client that is not open to open; others at once. */
async function whenOpen(client: object, ms: number): Promise<void> {
  const c = client as { isOpen?: unknown; once?: (event: string, fn: () => void) => unknown; off?: (event: string, fn: () => void) => unknown };
  if (c.isOpen !== false || typeof c.once !== "function") return;
  await new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      c.off?.("ready", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    timer.unref();
    c.once?.("ready", done);
  });
}

/**
 * Says a configuration error once, loudly (`logger.error`, else `warn`):
 * what is wrong and that requests are not limited as configured until it
 * is fixed.
 */
export class Alarm {
  private said = new Set<string>();
  constructor(
    private readonly logger: Logger,
    private readonly who: string,
  ) {}

  raise(error: unknown, consequence: string): void {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    // One error said once, whichever command met it (the start-up RL.PEEK, then a check).
    const gist = text.replace(/\bRL\.[A-Z]+\b/gi, "RL.*");
    if (this.said.has(gist)) return;
    this.said.add(gist);
    const line = `redis-ratelimit (${this.who}): CONFIGURATION ERROR: ${text}. ${consequence}`;
    (this.logger.error ?? this.logger.warn).call(this.logger, line);
  }
}

/** Forgets the breaker of `redis`'s client (tests). */
export function forgetBreaker(redis: RedisLike): void {
  breakers.delete(adapt(redis).client);
}
