/** The built package: ESM and CJS entry points with the same exports, and types for both. */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { it } from "node:test";
import { PACKAGE } from "./servers.js";

it("require() and import give the same API, with .d.ts for each", async () => {
  const require = createRequire(join(PACKAGE, "package.json"));
  const cjs = require("redis-ratelimit") as Record<string, unknown>;
  const esm = (await import("redis-ratelimit")) as Record<string, unknown>;
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
  for (const name of ["RateLimiter", "Decision", "TokenBucket", "rateLimit", "fastifyRateLimit", "RedisRatelimitStore", "RateLimiterRedis"]) {
    assert.equal(typeof cjs[name], "function", name);
  }
  assert.notEqual(cjs.Decision, esm.Decision, "two builds, not one re-exported");
  assert.ok(existsSync(join(PACKAGE, "dist/esm/index.d.ts")));
  assert.ok(existsSync(join(PACKAGE, "dist/cjs/index.d.ts")));
});
