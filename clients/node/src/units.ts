/**
 * Durations and numbers as the module reads them, checked when a limit is
 * built (so a wrong value fails at start-up, not on every request).
 *
 * A duration is milliseconds when a number (as everywhere in Node: `windowMs`,
 * `setTimeout`), or a string with the module's units: `"250ms"`, `"1.5s"`,
 * `"1m"`, `"1h"`, `"1d"`. A string without a unit is refused (the server
 * would read seconds where the number beside it means milliseconds), and so
 * is a window or period under a second given as a number (`FixedWindow(10,
 * 60)` is nearly always a minute meant, and would be 60 ms): say `"60s"`, or
 * `"60ms"` if you mean it.
 */

/** A duration: milliseconds as a number, or a string with a unit (`"1m"`). */
export type Duration = number | string;

/** The integers the module takes (limits, capacities, costs): 1 to 2^53-1. */
export const MAX_INTEGER = Number.MAX_SAFE_INTEGER;

const MS_PER_UNIT: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)$/i;
const MAX_DURATION_MS = 366 * 86_400_000;

/** A duration in milliseconds, or throws a RangeError naming `what`. */
export function durationMs(value: Duration, what: string): number {
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else if (typeof value === "string") {
    const match = DURATION.exec(value.trim());
    if (match === null) {
      throw new RangeError(
        `${what} ${JSON.stringify(value)} is not a duration: a number of milliseconds, or a decimal ` +
          `with its unit, ms, s, m, h or d, without spaces ("250ms", "1.5s", "1m"; a string without a unit is refused)`,
      );
    }
    ms = Number(match[1]) * (MS_PER_UNIT[(match[2] ?? "s").toLowerCase()] ?? 1000);
  } else {
    throw new TypeError(`${what} must be a number of milliseconds or a string such as "1m", not ${typeof value}`);
  }
  if (!Number.isFinite(ms) || ms < 1 || ms > MAX_DURATION_MS) {
    throw new RangeError(`${what} must be from 1 ms to 366 days, not ${String(value)}`);
  }
  return ms;
}

/**
 * The span of a limit (a window, a period) in milliseconds: a duration, and
 * when a number, at least 1000 (see above: a number under a second is
 * refused as ambiguous; a string says what it means).
 */
export function spanMs(value: Duration, what: string): number {
  const ms = durationMs(value, what);
  if (typeof value === "number" && ms < 1000) {
    throw new RangeError(
      `${what} ${value} would be ${value} ms: numbers are milliseconds. Write "${value}s" for seconds, ` +
        `or "${value}ms" if you mean milliseconds`,
    );
  }
  return ms;
}

/** A duration as a command argument: milliseconds, with their unit. */
export function durationArg(value: Duration, what: string): string {
  return `${decimalArg(durationMs(value, what))}ms`;
}

/**
 * A positive finite number spelled as a plain decimal, exactly the digits
 * JavaScript prints, never in exponent form (`1e-30` is
 * `0.000000000000000000000000000001`, `1e308` a 1 and 308 zeros): the
 * server reads no exponents, and rounding would send another number.
 */
export function decimalArg(value: number): string {
  const text = String(value);
  const m = /^(\d+)(?:\.(\d+))?e([+-]\d+)$/i.exec(text);
  if (m === null) return text;
  const whole = m[1] ?? "";
  const digits = whole + (m[2] ?? "");
  const point = whole.length + Number(m[3]);
  if (point <= 0) return `0.${"0".repeat(-point)}${digits}`;
  if (point >= digits.length) return digits + "0".repeat(point - digits.length);
  return `${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** Checks a whole number from `min` to 2^53-1; returns it. */
export function integer(value: unknown, what: string, min = 1): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${what} must be a whole number from ${min} to ${MAX_INTEGER}, not ${String(value)}`);
  }
  return value;
}

/** Checks a rate: a finite number above 0, per second. */
export function rate(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new RangeError(`${what} must be a finite number above 0 (per second), not ${String(value)}`);
  }
  return value;
}

/** Whole seconds, rounded up: a client that waits that long is never early. */
export function ceilSeconds(ms: number): number {
  return Math.ceil(ms / 1000);
}
