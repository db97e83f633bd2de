/** End to end: the README's example app, started as a process, answers 200 then 429 with every header. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { parseList } from "structured-headers";
import { get } from "./http.js";
import { PACKAGE, Server, freePort } from "./servers.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

it("examples/express.ts: ten allowed, the eleventh 429, every header", async () => {
  const appPort = await freePort();
  const app = spawn(process.execPath, [join(PACKAGE, "build/examples/express.js")], {
    env: { ...process.env, REDIS_PORT: String(server.port), PORT: String(appPort) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    await new Promise<void>((res, rej) => {
      const timer = setTimeout(() => rej(new Error("the example did not start within 10 s")), 10_000);
      app.stdout.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes(`listening on http://127.0.0.1:${appPort}`)) {
          clearTimeout(timer);
          res();
        }
      });
      app.on("exit", (code) => rej(new Error(`the example exited (${code})`)));
    });
    const replies = [];
    for (let i = 0; i < 11; i++) replies.push(await get(appPort, "/hello", { "x-api-key": "demo" }));
    assert.deepEqual(
      replies.map((r) => r.status),
      [...Array<number>(10).fill(200), 429],
    );
    const first = replies[0]!;
    assert.equal(first.body, '{"hello":"world"}');
    assert.equal(first.headers["x-ratelimit-limit"], "10");
    assert.equal(first.headers["x-ratelimit-remaining"], "9");
    assert.equal(first.headers["x-ratelimit-reset"], "1");
    assert.equal(first.headers["ratelimit-policy"], '"tokenbucket";q=10;w=10, "per-minute";q=100;w=60');
    assert.match(first.headers.ratelimit!, /^"tokenbucket";r=9;t=1, "per-minute";r=99;t=(\d+)$/);
    assert.equal(first.headers["retry-after"], undefined);
    const denied = replies[10]!;
    assert.equal(denied.headers["x-ratelimit-limit"], "10");
    assert.equal(denied.headers["x-ratelimit-remaining"], "0");
    assert.equal(denied.headers["x-ratelimit-reset"], "1");
    assert.equal(denied.headers["retry-after"], "1");
    assert.match(denied.headers.ratelimit!, /^"tokenbucket";r=0;t=1, "per-minute";r=90;t=(\d+)$/);
    assert.equal(denied.body, "Too many requests: retry in 1 s.\n");
    for (const r of replies) {
      parseList(r.headers.ratelimit!);
      parseList(r.headers["ratelimit-policy"]!);
    }
  } finally {
    app.kill();
  }
});
