/** Starting an app on a free port (or a unix socket) and sending it requests. */
import { type Server as HttpServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";

export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export function listen(app: (req: never, res: never) => void, path?: string): Promise<HttpServer> {
  return new Promise((res) => {
    const server = (app as unknown as { listen: (...args: unknown[]) => HttpServer }).listen(
      ...(path === undefined ? [0, "127.0.0.1"] : [path]),
      () => res(server),
    );
  });
}

export function port(server: HttpServer): number {
  return (server.address() as AddressInfo).port;
}

export function close(server: HttpServer): Promise<void> {
  return new Promise((res) => {
    server.closeAllConnections?.();
    server.close(() => res());
  });
}

/** GET `path` on a port or a unix socket, with `headers`. */
export function get(target: number | string, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((res, rej) => {
    const req = httpRequest(
      typeof target === "number"
        ? { host: "127.0.0.1", port: target, path, headers, agent: false }
        : { socketPath: target, path, headers, agent: false },
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (c: string) => (body += c));
        response.on("end", () => {
          const h: Record<string, string> = {};
          for (const [k, v] of Object.entries(response.headers)) if (v !== undefined) h[k] = Array.isArray(v) ? v.join(", ") : v;
          res({ status: response.statusCode ?? 0, headers: h, body });
        });
      },
    );
    req.on("error", rej);
    req.end();
  });
}

/** A loopback server that accepts connections and never answers: a hung Redis. */
export { createServer as createTcpServer } from "node:net";
