// Asks the node's own instance metadata service (169.254.169.254, link-local: the answer is about
// the machine the agent runs on, and needs no credentials). Plain HTTP as every provider documents
// it; each request bounded; retried with backoff until --metadata-timeout. The result is kept for
// the agent's lifetime: an instance's identity does not change, and a node at rest costs no requests.
import http from "node:http";
import { backoffDelay, sleep } from "../../kube/backoff.ts";
import {
  AUTO_ORDER,
  type InstanceMetadata,
  type MetadataDocument,
  PROVIDER_SPECS,
  type Provider,
  type ProviderSpec,
} from "./providers.ts";

export const METADATA_ADDRESS = "169.254.169.254";
export type MetadataMode = "none" | "auto" | Provider;

export type Lookup =
  | { status: "found"; provider: Provider; metadata: InstanceMetadata }
  /** Not configured, or `auto` found no service that answers in its provider's format. */
  | { status: "skipped"; reason: string }
  /** The configured provider did not answer in its format within the bound: the taint stays. */
  | { status: "unavailable"; reason: string };

/** One try at one provider: found, definitely not this provider, or down for now (worth retrying). */
type Attempt =
  | { kind: "found"; metadata: InstanceMetadata }
  | { kind: "not-this"; problem: string }
  | { kind: "down"; problem: string };

const REQUEST_TIMEOUT_MS = 2000;
const MAX_BODY = 64 * 1024;
/** Errors that say nothing listens at the address (bare metal): no point retrying within one lookup. */
const NOTHING_THERE = new Set(["ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH"]);

class Down extends Error {}
class NotThis extends Error {}

function request(method: string, path: string, headers: Record<string, string>, timeoutMs: number) {
  return new Promise<MetadataDocument>((resolve, reject) => {
    const req = http.request(
      { host: METADATA_ADDRESS, port: 80, method, path, headers, timeout: timeoutMs, agent: false },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
          if (body.length > MAX_BODY) req.destroy(new NotThis(`${path}: answer larger than ${MAX_BODY} bytes`));
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: lowercase(res.headers), body }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Down(`${method} ${path}: no answer within ${timeoutMs} ms`)));
    req.on("error", (err: NodeJS.ErrnoException) => {
      if (err instanceof Down || err instanceof NotThis) reject(err);
      else if (err.code && NOTHING_THERE.has(err.code)) reject(new NotThis(`${METADATA_ADDRESS}: ${err.code}`));
      else reject(new Down(`${method} ${path}: ${err.message}`));
    });
    req.end();
  });
}

function lowercase(headers: http.IncomingHttpHeaders): Record<string, string | undefined> {
  return Object.fromEntries(
    Object.entries(headers).map(([key, value]) => [key.toLowerCase(), Array.isArray(value) ? value.join(", ") : value]),
  );
}

/** A 5xx is the service failing (retry); any other non-200 simply is no answer from this provider. */
function checkServerError(document: MetadataDocument, what: string): MetadataDocument {
  if (document.status >= 500) throw new Down(`${what}: HTTP ${document.status}`);
  return document;
}

async function tryProvider(spec: ProviderSpec, timeoutMs: number): Promise<Attempt> {
  try {
    const headers = { ...spec.headers };
    if (spec.session) {
      const { path } = spec.session;
      const answer = checkServerError(await request("PUT", path, spec.session.headers, timeoutMs), path);
      if (answer.status !== 200 || answer.body === "") throw new NotThis(`PUT ${path}: HTTP ${answer.status}`);
      headers[spec.session.header] = answer.body.trim();
    }
    const documents: Record<string, MetadataDocument> = {};
    for (const [name, path] of Object.entries(spec.documents))
      documents[name] = checkServerError(await request("GET", path, headers, timeoutMs), path);
    const parsed = spec.parse(documents);
    return "problem" in parsed ? { kind: "not-this", problem: parsed.problem } : { kind: "found", metadata: parsed };
  } catch (err) {
    if (err instanceof Down) return { kind: "down", problem: err.message };
    if (err instanceof NotThis) return { kind: "not-this", problem: err.message };
    throw err;
  }
}

/**
 * One bounded lookup. A configured provider is retried on any failure until the bound; `auto` tries
 * each provider in AUTO_ORDER and retries only those that looked down (timeouts, 5xx), never one that
 * answered in another format.
 */
export async function lookupOnce(mode: Exclude<MetadataMode, "none">, boundMs: number): Promise<Lookup> {
  const deadline = Date.now() + boundMs;
  let candidates: Provider[] = mode === "auto" ? [...AUTO_ORDER] : [mode];
  const problems = new Map<Provider, string>();
  for (let round = 0; candidates.length > 0; round++) {
    const retry: Provider[] = [];
    for (const provider of candidates) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      const attempt = await tryProvider(PROVIDER_SPECS[provider], Math.min(REQUEST_TIMEOUT_MS, remaining));
      if (attempt.kind === "found") return { status: "found", provider, metadata: attempt.metadata };
      problems.set(provider, attempt.problem);
      if (attempt.kind === "down" || mode !== "auto") retry.push(provider);
    }
    candidates = retry;
    const pause = backoffDelay(round, { baseMs: 200, capMs: 2000 });
    if (candidates.length === 0 || Date.now() + pause >= deadline) break;
    await sleep(pause);
  }
  const why = [...problems].map(([provider, problem]) => `${provider}: ${problem}`).join("; ") || "timed out";
  if (mode === "auto")
    return { status: "skipped", reason: `no instance metadata service answered in its provider's format (${why})` };
  return { status: "unavailable", reason: `${mode} instance metadata did not answer within ${boundMs} ms (${why})` };
}

/** The agent's view: one answer kept for good once found (or skipped); after a failure, retried with backoff. */
export class InstanceMetadataSource {
  readonly mode: MetadataMode;
  private readonly boundMs: number;
  private settled: Lookup | undefined;
  private failures = 0;
  private lastFailure: { lookup: Lookup; retryAt: number } | undefined;
  private readonly onLookup: (lookup: Lookup) => void;

  /** `onLookup` sees each lookup that asked the service (for metrics), not the answers kept. */
  constructor(mode: MetadataMode, boundMs: number, onLookup: (lookup: Lookup) => void = () => {}) {
    this.mode = mode;
    this.boundMs = boundMs;
    this.onLookup = onLookup;
    if (mode === "none") this.settled = { status: "skipped", reason: "--instance-metadata=none" };
  }

  async lookup(now = Date.now()): Promise<Lookup> {
    if (this.settled) return this.settled;
    if (this.lastFailure && now < this.lastFailure.retryAt) return this.lastFailure.lookup;
    const lookup = await lookupOnce(this.mode as Exclude<MetadataMode, "none">, this.boundMs);
    this.onLookup(lookup);
    if (lookup.status !== "unavailable") this.settled = lookup;
    else {
      const retryInMs = backoffDelay(this.failures++, { baseMs: 1000, capMs: 300_000 });
      this.lastFailure = { lookup, retryAt: Date.now() + retryInMs };
    }
    return lookup;
  }
}
