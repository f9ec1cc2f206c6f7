// The HTTP layer: one keep-alive connection pool, JSON in and out, typed errors, and retries
// only where a second attempt cannot do harm.
import http, { type IncomingMessage } from "node:http";
import https from "node:https";
import type { Status } from "kubernetes-types/meta/v1.js";
import packageJson from "../../package.json" with { type: "json" };
import { backoffDelay, sleep } from "../time/backoff.ts";
import type { ClientConfig, Credentials } from "./config.ts";
import { ApiError, isApiError, isConnectionError, isTransient } from "./errors.ts";

export type Query = Record<string, string | number | boolean | undefined>;

export interface RequestOptions {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Query;
  body?: unknown;
  contentType?: string;
  /** Kubernetes verb for metrics and messages (get, list, watch, create, update, patch, delete). */
  verb?: string;
  timeoutMs?: number;
  /** Safe to send again after a failure that may have reached the server. Default: GET only. */
  idempotent?: boolean;
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** Program name in the User-Agent: `local-ccm/<version> (<component>)`. */
  component: string;
  timeoutMs?: number;
  maxRetries?: number;
  /** Called once per HTTP response (and with code 0 for a connection failure). */
  onResponse?: (verb: string, code: number) => void;
}

export const VERSION: string = packageJson.version;

export class KubeClient {
  readonly config: ClientConfig;
  readonly userAgent: string;
  private readonly options: Required<Omit<ClientOptions, "onResponse">> & Pick<ClientOptions, "onResponse">;
  private agent: { key: string; agent: http.Agent } | undefined;

  constructor(config: ClientConfig, options: ClientOptions) {
    this.config = config;
    this.options = { timeoutMs: 30_000, maxRetries: 5, ...options };
    this.userAgent = `local-ccm/${VERSION} (${options.component})`;
  }

  /** Sends a request and parses the JSON answer, retrying where that is safe. */
  async request<T>(options: RequestOptions): Promise<T> {
    return JSON.parse(await this.requestText(options)) as T;
  }

  /** The same, for plain-text endpoints such as /readyz. */
  async requestText(options: RequestOptions): Promise<string> {
    const res = await this.withRetries(options, () => this.send(options, this.options.timeoutMs));
    return readBody(res);
  }

  /** Opens a long-lived response (watch); the caller consumes and ends it. */
  async stream(options: RequestOptions & { idleTimeoutMs: number }): Promise<IncomingMessage> {
    return this.withRetries({ ...options, idempotent: false }, () =>
      this.send(options, options.idleTimeoutMs),
    );
  }

  /** Closes pooled connections so the process can exit. */
  close(): void {
    this.agent?.agent.destroy();
    this.agent = undefined;
  }

  private async withRetries(
    options: RequestOptions,
    attempt: () => Promise<IncomingMessage>,
  ): Promise<IncomingMessage> {
    const idempotent = options.idempotent ?? options.method === "GET";
    let reauthenticated = false;
    for (let retry = 0; ; retry++) {
      try {
        return await attempt();
      } catch (err) {
        if (options.signal?.aborted) throw err;
        if (isApiError(err, "Unauthorized") && !reauthenticated) {
          // Rotated token or expired exec credential: fetch fresh ones once, then give up.
          reauthenticated = true;
          this.config.invalidate();
          continue;
        }
        // 429 and refused connections mean the request was never processed; others only when idempotent.
        const safe =
          isApiError(err, "TooManyRequests") ||
          (err as NodeJS.ErrnoException).code === "ECONNREFUSED" ||
          (idempotent && isTransient(err));
        if (!safe || retry >= this.options.maxRetries) throw err;
        const wait =
          isApiError(err) && err.retryAfterSeconds !== undefined
            ? err.retryAfterSeconds * 1000
            : backoffDelay(retry, { baseMs: 200, capMs: 5_000 });
        await sleep(wait, options.signal);
      }
    }
  }

  private async send(options: RequestOptions, timeoutMs: number): Promise<IncomingMessage> {
    const verb = options.verb ?? options.method.toLowerCase();
    const creds = await this.config.credentials();
    const url = new URL(this.config.server + options.path);
    for (const [key, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    const body =
      options.body === undefined
        ? undefined
        : typeof options.body === "string"
          ? options.body
          : JSON.stringify(options.body);
    const headers: http.OutgoingHttpHeaders = { Accept: "application/json", "User-Agent": this.userAgent };
    if (creds.token) headers.Authorization = `Bearer ${creds.token}`;
    if (body !== undefined) {
      headers["Content-Type"] = options.contentType ?? "application/json";
      headers["Content-Length"] = Buffer.byteLength(body);
    }
    const transport = url.protocol === "https:" ? https : http;
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = transport.request(
        url,
        { method: options.method, headers, agent: this.agentFor(creds), signal: options.signal },
        resolve,
      );
      req.setTimeout(timeoutMs, () =>
        req.destroy(
          Object.assign(new Error(`${verb} ${url.pathname} timed out after ${timeoutMs} ms`), {
            code: "ETIMEDOUT",
          }),
        ),
      );
      req.on("error", reject);
      req.end(body);
    }).catch((err: unknown) => {
      if (isConnectionError(err)) this.options.onResponse?.(verb, 0);
      throw err;
    });
    this.options.onResponse?.(verb, res.statusCode ?? 0);
    if ((res.statusCode ?? 0) < 400) return res;
    const text = await readBody(res);
    let status: Status | undefined;
    try {
      status = JSON.parse(text) as Status;
    } catch {
      status = { message: text.slice(0, 200).trim() };
    }
    const retryAfter = Number(res.headers["retry-after"]);
    throw new ApiError(
      res.statusCode ?? 0,
      status,
      `${verb} ${url.pathname}`,
      Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter : undefined,
    );
  }

  /** One pooled agent per client-certificate; rebuilt only when an exec plugin hands out a new one. */
  private agentFor(creds: Credentials): http.Agent {
    const key = `${creds.cert ?? ""}\0${creds.key ?? ""}`;
    if (this.agent?.key === key) return this.agent.agent;
    this.agent?.agent.destroy();
    const isHttps = this.config.server.startsWith("https:");
    const agent = isHttps
      ? new https.Agent({
          keepAlive: true,
          ca: this.config.ca,
          cert: creds.cert,
          key: creds.key,
          rejectUnauthorized: !this.config.insecureSkipTLSVerify,
          servername: this.config.tlsServerName,
        })
      : new http.Agent({ keepAlive: true });
    this.agent = { key, agent };
    return agent;
  }
}

async function readBody(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
