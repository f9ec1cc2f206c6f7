// Asks the node's own instance metadata service (169.254.169.254, link-local: the answer is about
// the machine the agent runs on, and needs no credentials). Plain HTTP as every provider documents
// it; each request bounded as a whole; retried with backoff until --metadata-timeout. The result is kept for
// the agent's lifetime: an instance's identity does not change, and a node at rest costs no requests.
import http from "node:http";
import { backoffDelay, sleep } from "../../time/backoff.ts";
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
  /** Not configured, or `auto` found no service there (nothing listens, or only other formats answer). */
  | { status: "skipped"; reason: string }
  /** The configured provider, or under `auto` a service that took the connection, did not answer in
   * its format within the bound: the taint stays, and the lookup is retried with backoff. */
  | { status: "unavailable"; reason: string };

/** One try at one provider: found, definitely not this provider, or down for now (worth retrying). */
export type Attempt =
  | { kind: "found"; metadata: InstanceMetadata }
  | { kind: "not-this"; problem: string }
  | { kind: "down"; problem: string };

const REQUEST_TIMEOUT_MS = 2000;
/** Pauses between the rounds of one lookup: the bound leaves room for a few. */
export const ROUND_BACKOFF = { baseMs: 200, capMs: 2000 };
/** Pauses between lookups once one gave up: soon at first, then rarely (a node at rest asks little). */
export const LOOKUP_BACKOFF = { baseMs: 1000, capMs: 300_000 };
const MAX_BODY = 64 * 1024;
/** Errors that say nothing listens at the address (bare metal): no point retrying within one lookup. */
const NOTHING_THERE = new Set(["ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH"]);

class Down extends Error {}
class NotThis extends Error {}

/**
 * How long one request may take, started at `now` in a lookup ending at `deadline`, and how to say it
 * did not make it. The words do not carry the remaining time: a lookup that fails the same way again
 * gives the same reason, reported once rather than with every retry.
 */
export function requestBound(now: number, deadline: number): { ms: number; missed: string } {
  const ms = Math.max(0, Math.min(REQUEST_TIMEOUT_MS, deadline - now));
  return { ms, missed: ms < REQUEST_TIMEOUT_MS ? "before --metadata-timeout" : `within ${REQUEST_TIMEOUT_MS} ms` };
}

function request(method: string, path: string, headers: Record<string, string>, deadline: number) {
  const bound = requestBound(Date.now(), deadline);
  return new Promise<MetadataDocument>((resolve, reject) => {
    const req = http.request(
      { host: METADATA_ADDRESS, port: 80, method, path, headers, agent: false },
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
    // The whole exchange is bounded, not only silence on the socket: a service that sends its answer
    // a byte at a time would otherwise hold the lookup far past --metadata-timeout. A connection that
    // never opens is no service (bare metal whose default route swallows link-local packets); one that
    // opens and then does not answer is a service that is down for now.
    let connected = false;
    req.on("socket", (socket) => socket.once("connect", () => (connected = true)));
    const late = () =>
      req.destroy(
        connected
          ? new Down(`${method} ${path}: no complete answer ${bound.missed}`)
          : new NotThis(`${METADATA_ADDRESS}: no connection ${bound.missed}`),
      );
    const timer = setTimeout(late, bound.ms);
    req.on("close", () => clearTimeout(timer));
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
export function isServerFailure(status: number): boolean {
  return status >= 500;
}

function checkServerError(document: MetadataDocument, what: string): MetadataDocument {
  if (isServerFailure(document.status)) throw new Down(`${what}: HTTP ${document.status}`);
  return document;
}

async function tryProvider(spec: ProviderSpec, deadline: number): Promise<Attempt> {
  try {
    const headers = { ...spec.headers };
    if (spec.session) {
      const { path } = spec.session;
      const answer = checkServerError(await request("PUT", path, spec.session.headers, deadline), path);
      if (answer.status !== 200 || answer.body === "") throw new NotThis(`PUT ${path}: HTTP ${answer.status}`);
      headers[spec.session.header] = answer.body.trim();
    }
    const documents: Record<string, MetadataDocument> = {};
    for (const [name, path] of Object.entries(spec.documents))
      documents[name] = checkServerError(await request("GET", path, headers, deadline), path);
    const parsed = spec.parse(documents);
    return "problem" in parsed ? { kind: "not-this", problem: parsed.problem } : { kind: "found", metadata: parsed };
  } catch (err) {
    if (err instanceof Down) return { kind: "down", problem: err.message };
    if (err instanceof NotThis) return { kind: "not-this", problem: err.message };
    throw err;
  }
}

/**
 * Whether a provider that failed is asked again within the lookup: a configured one always (the node
 * should have it; a service still starting may refuse connections); under `auto` only one that looked
 * down (timeouts, 5xx), never one that answered in another format or where nothing listens.
 */
export function askAgain(mode: Exclude<MetadataMode, "none">, failure: Exclude<Attempt["kind"], "found">): boolean {
  return mode !== "auto" || failure === "down";
}

/**
 * One bounded lookup. A configured provider is retried on any failure until the bound; `auto` tries
 * each provider in AUTO_ORDER and retries only those that looked down.
 */
export async function lookupOnce(mode: Exclude<MetadataMode, "none">, boundMs: number): Promise<Lookup> {
  const deadline = Date.now() + boundMs;
  let candidates: Provider[] = mode === "auto" ? [...AUTO_ORDER] : [mode];
  const problems = new Map<Provider, string>();
  const down = new Set<Provider>();
  for (let round = 0; candidates.length > 0; round++) {
    const retry: Provider[] = [];
    for (const provider of candidates) {
      if (Date.now() >= deadline) break;
      const attempt = await tryProvider(PROVIDER_SPECS[provider], deadline);
      if (attempt.kind === "found") return { status: "found", provider, metadata: attempt.metadata };
      problems.set(provider, attempt.problem);
      if (attempt.kind === "down") down.add(provider);
      else down.delete(provider);
      if (askAgain(mode, attempt.kind)) retry.push(provider);
    }
    candidates = retry;
    const pause = backoffDelay(round, ROUND_BACKOFF);
    if (candidates.length === 0 || Date.now() + pause >= deadline) break;
    await sleep(pause);
  }
  const why = [...problems].map(([provider, problem]) => `${provider}: ${problem}`).join("; ") || "timed out";
  // Under auto, a service that took the connection but failed or hung is there and down for now: the
  // node waits for it (retried with backoff) rather than being initialised for good without its identity.
  if (mode === "auto" && down.size === 0)
    return { status: "skipped", reason: `no instance metadata service answered in its provider's format (${why})` };
  if (mode === "auto")
    return { status: "unavailable", reason: `an instance metadata service answered but failed or hung (${why})` };
  return { status: "unavailable", reason: `${mode} instance metadata did not answer within ${boundMs} ms (${why})` };
}

export interface SourceHooks {
  /** Sees each lookup that asked the service (for metrics), not the answers kept. */
  onLookup?: (lookup: Lookup) => void;
  /** How a lookup asks the service (tests of the retry schedule give their own). */
  ask?: typeof lookupOnce;
  now?: () => number;
}

/** The agent's view: one answer kept for good once found (or skipped); after a failure, retried with backoff. */
export class InstanceMetadataSource {
  readonly mode: MetadataMode;
  private readonly boundMs: number;
  private settled: Lookup | undefined;
  private failures = 0;
  private lastFailure: { lookup: Lookup; retryAt: number } | undefined;
  private readonly hooks: Required<SourceHooks>;

  constructor(mode: MetadataMode, boundMs: number, hooks: SourceHooks = {}) {
    this.mode = mode;
    this.boundMs = boundMs;
    this.hooks = { onLookup: () => {}, ask: lookupOnce, now: Date.now, ...hooks };
    if (mode === "none") this.settled = { status: "skipped", reason: "--instance-metadata=none" };
  }

  async lookup(): Promise<Lookup> {
    if (this.settled) return this.settled;
    if (this.lastFailure && this.hooks.now() < this.lastFailure.retryAt) return this.lastFailure.lookup;
    const lookup = await this.hooks.ask(this.mode as Exclude<MetadataMode, "none">, this.boundMs);
    this.hooks.onLookup(lookup);
    if (lookup.status !== "unavailable") this.settled = lookup;
    else {
      const retryInMs = backoffDelay(this.failures++, LOOKUP_BACKOFF);
      this.lastFailure = { lookup, retryAt: this.hooks.now() + retryInMs };
    }
    return lookup;
  }
}
