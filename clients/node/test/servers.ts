/**
 * Real redis-server processes for the tests: each on a free loopback port,
 * in its own temporary directory, loading the module, killed when the test
 * file ends. `RL_MODULE` names the module (default: the debug build `make
 * test` makes, ../../target/debug/libredis_ratelimit.so from this package);
 * `RL_SERVER` and `RL_CLI` another server and cluster tool.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** This package's folder (the tests run from build/test/). */
export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

export function modulePath(): string {
  const path = process.env.RL_MODULE ?? resolve(PACKAGE, "../../target/debug/libredis_ratelimit.so");
  if (!existsSync(path)) throw new Error(`${path} is missing: build it first (make test does), or set RL_MODULE`);
  return path;
}

/** A loopback port nobody listens on right now (the OS's pick). */
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address ? res(address.port) : rej(new Error("no port"))));
    });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, timeoutMs: number, done: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what} after ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** One RESP command over a fresh connection, its raw reply text (for setup only). */
export function rawCommand(port: number, ...args: string[]): Promise<string> {
  return new Promise((res) => {
    const socket = connect(port, "127.0.0.1");
    let data = "";
    socket.on("connect", () => {
      socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`);
    });
    socket.on("data", (chunk) => {
      data += chunk.toString();
      if (data.endsWith("\r\n")) {
        socket.end();
        res(data);
      }
    });
    socket.on("error", () => res(""));
    socket.setTimeout(1000, () => {
      socket.destroy();
      res(data);
    });
  });
}

export class Server {
  readonly dir: string;
  process!: ChildProcess;
  port!: number;

  private constructor() {
    this.dir = mkdtempSync(join(tmpdir(), "rl-nodetest-"));
  }

  /** `args`: more server options (`--requirepass`, `--replicaof`); `password`: what the readiness PING sends first. */
  static async start(options: { cluster?: boolean; module?: boolean; args?: string[]; password?: string } = {}): Promise<Server> {
    const s = new Server();
    s.port = await freePort();
    const args = ["--port", String(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--save", "", "--appendonly", "no"];
    if (options.module !== false) args.push("--loadmodule", modulePath());
    args.push("--logfile", join(s.dir, "server.log"), ...(options.args ?? []));
    if (options.cluster === true) {
      args.push("--cluster-enabled", "yes", "--cluster-port", String(await freePort()), "--cluster-node-timeout", "1000");
    }
    s.process = spawn(process.env.RL_SERVER ?? "redis-server", args, { stdio: "ignore" });
    try {
      await waitFor("redis-server to answer PING", 10_000, async () => {
        if (s.process.exitCode !== null) throw new Error(`redis-server exited; its log:\n${s.log()}`);
        if (options.password !== undefined) return (await rawCommand(s.port, "AUTH", options.password)).startsWith("+OK");
        return (await rawCommand(s.port, "PING")).startsWith("+PONG");
      });
    } catch (error) {
      s.stop();
      throw error;
    }
    return s;
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, "server.log"), "utf8");
    } catch {
      return "";
    }
  }

  stop(): void {
    this.process.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Three primaries without replicas, every slot served, the module on each. */
export class Cluster {
  nodes: Server[] = [];

  static async start(size = 3): Promise<Cluster> {
    const c = new Cluster();
    try {
      for (let i = 0; i < size; i++) c.nodes.push(await Server.start({ cluster: true }));
      await run(
        process.env.RL_CLI ?? "redis-cli",
        ["--cluster", "create", ...c.nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-yes"],
        { timeout: 30_000 },
      );
      await waitFor("a healthy cluster", 30_000, async () => {
        for (const n of c.nodes) {
          const info = await rawCommand(n.port, "CLUSTER", "INFO");
          if (!info.includes("cluster_state:ok") || !info.includes("cluster_slots_ok:16384")) return false;
        }
        return true;
      });
    } catch (error) {
      c.stop();
      throw error;
    }
    return c;
  }

  get ports(): number[] {
    return this.nodes.map((n) => n.port);
  }

  stop(): void {
    for (const n of this.nodes) n.stop();
  }
}
