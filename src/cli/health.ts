// The health endpoint, /healthz (the process serves HTTP) and /readyz (the program's own check), and the
// metrics endpoint, /metrics (Prometheus text), plain or secure (HTTPS, authorized readers only: metricsauth.ts).
// Each binds exactly the address it is given, IPv4 or IPv6.
import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";
import { hostPort } from "../net/ip.ts";
import type { Access } from "./metricsauth.ts";
import { METRICS_CONTENT_TYPE, type Registry } from "./metrics.ts";

export interface BindAddress {
  /** An IP literal; undefined = every address of both families (Go's ":port"). */
  host?: string;
  /** 0 = any free port (tests). */
  port: number;
}

/**
 * "host:port", "[v6]:port" or ":port" → BindAddress; "" → undefined (server disabled). Brackets around an IPv4
 * address are accepted as Go's net.SplitHostPort accepts them, so "[$(POD_IP)]:port" fits either family.
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
  if (isIP(host) === 0 || (match[1] === undefined && isIP(host) === 6)) {
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
  /** Also served, unauthenticated, on /metrics (--secure-metrics=false at the health address). */
  metrics?: Registry;
}

export interface MetricsServerOptions {
  address: BindAddress;
  metrics: Registry;
  /** HTTPS with this certificate and key (PEM); plain HTTP without. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** Decides each request (secure metrics) from its Authorization header and source address; without it anyone may read. */
  authorize?: (authorization: string | undefined, path: string, source: string) => Promise<Access>;
  /** Told of each refusal (its rule and reason), for the log. */
  onRefused?: (refusal: Extract<Access, { allowed: false }>) => void;
}

/** A listening endpoint. */
export interface HealthServer {
  /** Where it listens, "host:port" or "[v6]:port", with the real port when 0 was asked. */
  readonly address: string;
  readonly port: number;
  close(): Promise<void>;
}

interface Reply {
  status: number;
  body: string;
  type?: string;
}

type Routes = Record<string, (req: http.IncomingMessage) => Reply | Promise<Reply>>;

/** /healthz, /readyz (and /metrics when shared) over plain HTTP: what kubelet's probes ask. */
export function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const routes: Routes = {
    "/healthz": () => ({ status: 200, body: "ok\n" }),
    "/readyz": async () => {
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
    },
  };
  const { metrics } = options;
  if (metrics) routes["/metrics"] = () => metricsReply(metrics);
  return serve(http.createServer(), options.address, routes);
}

/** /metrics alone: over HTTPS and for authorized readers only when secure, plain and open otherwise. */
export function startMetricsServer(options: MetricsServerOptions): Promise<HealthServer> {
  const { authorize, metrics, onRefused, tls } = options;
  const server = tls ? https.createServer({ cert: tls.cert, key: tls.key }) : http.createServer();
  return serve(server, options.address, {
    "/metrics": async (req) => {
      if (!authorize) return metricsReply(metrics);
      const access = await authorize(req.headers.authorization, "/metrics", req.socket.remoteAddress ?? "");
      if (access.allowed) return metricsReply(metrics);
      onRefused?.(access);
      return { status: access.status, body: `${REFUSALS[access.status]}: ${access.reason}\n` };
    },
  });
}

const REFUSALS = { 401: "Unauthorized", 403: "Forbidden", 429: "Too Many Requests", 500: "Internal Server Error" };

const metricsReply = (metrics: Registry): Reply => ({
  status: 200,
  body: metrics.expose(),
  type: METRICS_CONTENT_TYPE,
});

async function serve(server: http.Server | https.Server, address: BindAddress, routes: Routes): Promise<HealthServer> {
  server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    respond(req, routes).then(
      ({ status, body, type }) => {
        res.writeHead(status, { "content-type": type ?? "text/plain; charset=utf-8" });
        res.end(req.method === "HEAD" ? undefined : body);
      },
      () => res.destroy(),
    );
  });
  // A probe or scrape answers in milliseconds; a slow or stuck client must not hold memory for minutes.
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => {
      const where = hostPort(address.host ?? "", address.port);
      reject(new Error(`cannot listen on ${where}: ${err.code ?? err.message}`));
    });
    server.listen({ host: address.host, port: address.port }, resolve);
  });
  const bound = server.address() as { address: string; port: number };
  return {
    address: hostPort(address.host === undefined ? "" : bound.address, bound.port),
    port: bound.port,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // keep-alive scrapers would otherwise hold close() open
      }),
  };
}

async function respond(req: http.IncomingMessage, routes: Routes): Promise<Reply> {
  if (req.method !== "GET" && req.method !== "HEAD") return { status: 405, body: "method not allowed\n" };
  const route = routes[new URL(req.url ?? "/", "http://health").pathname];
  return route ? route(req) : { status: 404, body: "not found\n" };
}
