// The health and metrics endpoint: /healthz (the process serves HTTP), /readyz (the program's own
// check) and /metrics (Prometheus text). Binds exactly the address it is given, IPv4 or IPv6.
import http from "node:http";
import { isIP } from "node:net";
import { hostPort } from "../net/ip.ts";
import { METRICS_CONTENT_TYPE, type Registry } from "./metrics.ts";

export interface BindAddress {
  /** An IP literal; undefined = every address of both families (Go's ":port"). */
  host?: string;
  /** 0 = any free port (tests). */
  port: number;
}

/**
 * "host:port", "[v6]:port" or ":port" → BindAddress; "" → undefined (server disabled).
 * Throws a one-line Error naming what is wrong (flag tables turn it into a UsageError).
 */
export function parseBindAddress(text: string): BindAddress | undefined {
  if (text === "") return undefined;
  const match = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text);
  if (!match) throw new Error("must be host:port, [ipv6]:port or :port");
  const host = match[1] ?? match[2] ?? "";
  const port = Number(match[3]);
  if (port > 65535) throw new Error(`port ${port} is out of range (0-65535)`);
  if (host === "") return { port };
  if (isIP(host) === 0 || (match[1] !== undefined) !== (isIP(host) === 6)) {
    throw new Error(`"${host}" is not an IP address (IPv6 goes in brackets: [::1]:port)`);
  }
  return { host, port };
}

export interface Readiness {
  ok: boolean;
  /** Why not ready; the /readyz body. */
  reason?: string;
}

export interface HealthServerOptions {
  address: BindAddress;
  ready: () => Readiness | Promise<Readiness>;
  metrics: Registry;
}

export interface HealthServer {
  /** Where it listens, "host:port" or "[v6]:port", with the real port when 0 was asked. */
  readonly address: string;
  readonly port: number;
  close(): Promise<void>;
}

export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const server = http.createServer((req, res) => {
    respond(req, options).then(
      ({ status, body, type }) => {
        res.writeHead(status, { "content-type": type ?? "text/plain; charset=utf-8" });
        res.end(req.method === "HEAD" ? undefined : body);
      },
      () => res.destroy(),
    );
  });
  // A probe answers in milliseconds; a slow or stuck client must not hold memory for minutes.
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => {
      const where = hostPort(options.address.host ?? "", options.address.port);
      reject(new Error(`cannot listen on ${where}: ${err.code ?? err.message}`));
    });
    server.listen({ host: options.address.host, port: options.address.port }, resolve);
  });
  const bound = server.address() as { address: string; port: number };
  return {
    address: hostPort(options.address.host === undefined ? "" : bound.address, bound.port),
    port: bound.port,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // keep-alive scrapers would otherwise hold close() open
      }),
  };
}

interface Reply {
  status: number;
  body: string;
  type?: string;
}

async function respond(req: http.IncomingMessage, options: HealthServerOptions): Promise<Reply> {
  if (req.method !== "GET" && req.method !== "HEAD") return { status: 405, body: "method not allowed\n" };
  switch (new URL(req.url ?? "/", "http://health").pathname) {
    case "/healthz":
      return { status: 200, body: "ok\n" };
    case "/readyz": {
      const readiness = await Promise.resolve()
        .then(options.ready)
        .catch(
          (err: unknown): Readiness => ({
            ok: false,
            reason: `readiness check failed: ${err instanceof Error ? err.message : String(err)}`,
          }),
        );
      return readiness.ok
        ? { status: 200, body: "ok\n" }
        : { status: 503, body: `${readiness.reason ?? "not ready"}\n` };
    }
    case "/metrics":
      return { status: 200, body: options.metrics.expose(), type: METRICS_CONTENT_TYPE };
    default:
      return { status: 404, body: "not found\n" };
  }
}
