/** The top-level README's Node.js quick start, run as the app it starts: ten requests allowed, the eleventh 429. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { get } from "./http.js";
import { PACKAGE, Server, freePort } from "./servers.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(() => server.stop());

/** The README's one `js` block, under "From Python and Node.js". */
function quickStart(): string {
  const readme = readFileSync(join(PACKAGE, "../../README.md"), "utf8");
  const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.equal(blocks.length, 1, "the README has one js block, the Node.js quick start");
  return blocks[0]!;
}

it("the README's quick start limits an Express app: 10 at once, then 429", async () => {
  const code = quickStart();
  assert.ok(code.includes("new Redis()"), "the quick start connects with new Redis()");
  const appPort = await freePort();
  // Inside the package, so that `import "redis-ratelimit"` names this package.
  const file = join(PACKAGE, "build", "readme-quickstart.mjs");
  writeFileSync(
    file,
    code.replace("new Redis()", `new Redis(${server.port})`) +
      `app.get("/", (_req, res) => { res.send("hello"); });\n` +
      `app.listen(${appPort}, "127.0.0.1", () => console.log("listening"));\n`,
  );
  const app = spawn(process.execPath, [file], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    await new Promise<void>((res, rej) => {
      const timer = setTimeout(() => rej(new Error("the quick start did not start within 10 s")), 10_000);
      app.stdout.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("listening")) {
          clearTimeout(timer);
          res();
        }
      });
      app.on("exit", (code) => rej(new Error(`the quick start exited (${code})`)));
    });
    const replies = [];
    for (let i = 0; i < 11; i++) replies.push(await get(appPort, "/"));
    assert.deepEqual(
      replies.map((r) => r.status),
      [...Array<number>(10).fill(200), 429],
    );
    assert.equal(replies[0]!.headers["x-ratelimit-limit"], "10");
    assert.equal(replies[0]!.headers["x-ratelimit-remaining"], "9");
    assert.equal(replies[10]!.headers["retry-after"], "1");
  } finally {
    app.kill();
    rmSync(file, { force: true });
  }
});
