// Who may read /metrics over HTTPS: the Kubernetes convention of controller-runtime's secure metrics
// (filters.WithAuthenticationAndAuthorization) and kube-rbac-proxy. The scraper's bearer token is reviewed by the
// API server (authentication.k8s.io/v1 TokenReview, for the audiences given, if any), then the user it names is
// checked for `get` on the non-resource URL /metrics (authorization.k8s.io/v1 SubjectAccessReview). Both answers
// are cached briefly, so a scrape every 15-30 s costs about one review of each per cache period.
// Made-up tokens each need a TokenReview, so new tokens are reviewed within budgets (per source address, and in
// all) that keep anyone who reaches the port from turning it into load on the API server; the budgets must not
// let that someone lock the authorised scraper out, so a token whose last review authenticated it is reviewed
// again outside them, and tokens the API server refused are remembered apart, where they cannot push it out.
import { createHash } from "node:crypto";
import type { KubeClient } from "../kube/client.ts";

/** A TokenReview's status.user, as the API server returns it. */
export interface UserInfo {
  username?: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

export interface TokenReviewStatus {
  authenticated?: boolean;
  user?: UserInfo;
  /** The audiences of spec.audiences the token is valid for. */
  audiences?: string[];
  error?: string;
}

export interface AccessReviewStatus {
  allowed: boolean;
  denied?: boolean;
  reason?: string;
  evaluationError?: string;
}

/** The two API calls, apart so the decision can be tested with fakes. */
export interface Reviewer {
  /** `audiences` empty: the API server's own (a token valid for API requests). */
  reviewToken(token: string, audiences: readonly string[]): Promise<TokenReviewStatus>;
  reviewAccess(user: UserInfo, path: string, verb: string): Promise<AccessReviewStatus>;
}

export type Access =
  | { allowed: true; user: string }
  /**
   * 401: no or an unauthenticated token; 403: a user without the grant; 429: too many new tokens to review
   * (from this source or in all); 500: the reviews failed.
   */
  | { allowed: false; status: 401 | 403 | 429 | 500; rule: string; reason: string };

/**
 * The bearer token of an Authorization header, read as the API server's bearer token authenticator reads it:
 * trimmed, split on single spaces into at most three parts, the scheme "bearer" in any case, the token the
 * second part and not empty (anything after another space is ignored).
 */
export function bearerToken(header: string | undefined): string | undefined {
  const parts = (header ?? "").trim().split(" ");
  if (parts.length < 2 || parts[0]?.toLowerCase() !== "bearer") return undefined;
  return parts[1] || undefined;
}

/**
 * Rule "authentication": what a TokenReview's status means for the request. With audiences asked for, the
 * status must name one of them, as the API server's own webhook token authenticator requires: an API server
 * that ignored spec.audiences would otherwise pass a token minted for anything.
 */
export function decideAuthentication(status: TokenReviewStatus, audiences: readonly string[] = []): Access | UserInfo {
  if (!status.authenticated || !status.user?.username) {
    const why = status.error ? `: ${status.error}` : "";
    return { allowed: false, status: 401, rule: "authentication", reason: `token not authenticated${why}` };
  }
  if (audiences.length > 0 && !(status.audiences ?? []).some((audience) => audiences.includes(audience))) {
    const reason = `token not valid for audience ${audiences.map((a) => JSON.stringify(a)).join(", ")}`;
    return { allowed: false, status: 401, rule: "audience", reason };
  }
  return status.user;
}

/** Rule "authorization": what a SubjectAccessReview's status means for `user`. */
export function decideAuthorization(user: UserInfo, status: AccessReviewStatus, path: string): Access {
  const name = user.username ?? "";
  if (status.allowed && !status.denied) return { allowed: true, user: name };
  const why = status.reason || status.evaluationError;
  return {
    allowed: false,
    status: 403,
    rule: "authorization",
    reason: `user ${JSON.stringify(name)} may not get ${path}${why ? `: ${why}` : ""}`,
  };
}

export interface CacheTtls {
  /** TokenReview answers that authenticate. */
  tokenMs: number;
  /** TokenReview answers that do not: shorter, so a token the API server failed to know yet is tried again soon. */
  tokenDeniedMs: number;
  /** SubjectAccessReview answers that allow. */
  allowMs: number;
  /** SubjectAccessReview answers that deny: shorter, so a new grant takes effect soon. */
  denyMs: number;
}

export const DEFAULT_TTLS: CacheTtls = { tokenMs: 60_000, tokenDeniedMs: 10_000, allowMs: 60_000, denyMs: 10_000 };

/**
 * New tokens reviewed in any window: a few Prometheus replicas need a few, each from its own pod address; more
 * is someone trying tokens. One source gets a part of the whole, so that one client alone never uses it all.
 */
export interface ReviewBudgets {
  perSource: number;
  all: number;
  windowMs: number;
}

export const REVIEW_BUDGETS: ReviewBudgets = { perSource: 20, all: 60, windowMs: 60_000 };

/** What is known when a token not in the cache arrives: was it authenticated before, what was spent lately. */
export interface ReviewRequest {
  /** The source address, as reviews are counted. */
  source: string;
  /** The token's last review (still remembered, expired) authenticated it. */
  renewal: boolean;
  /** Budgeted reviews in the current window from this source, and from all. */
  fromSource: number;
  fromAll: number;
}

export type ReviewDecision =
  | { review: true; counted: boolean; rule: "renewal" | "budget" }
  | Extract<Access, { allowed: false }>;

/**
 * Rules "renewal", "review-rate-source", "review-rate": whether a token may be reviewed now. A token the API
 * server authenticated last time is reviewed again outside the budgets: only holders of real tokens get there,
 * once per token per cache period, and that is what keeps the scraper served however the budgets are spent.
 */
export function decideReview(request: ReviewRequest, budgets: ReviewBudgets): ReviewDecision {
  if (request.renewal) return { review: true, counted: false, rule: "renewal" };
  const minute = budgets.windowMs === 60_000 ? "a minute" : `in ${budgets.windowMs / 1000} s`;
  if (request.fromSource >= budgets.perSource) {
    const reason = `too many new tokens from ${request.source}: at most ${budgets.perSource} reviewed ${minute}`;
    return { allowed: false, status: 429, rule: "review-rate-source", reason };
  }
  if (request.fromAll >= budgets.all) {
    const reason = `too many new tokens: at most ${budgets.all} reviewed ${minute}`;
    return { allowed: false, status: 429, rule: "review-rate", reason };
  }
  return { review: true, counted: true, rule: "budget" };
}

/** When the budgeted reviews of the last window started, in all and per source. */
class ReviewWindow {
  readonly #all: { at: number; source: string }[] = [];
  readonly #bySource = new Map<string, number>();
  readonly windowMs: number;
  constructor(windowMs: number) {
    this.windowMs = windowMs;
  }

  /** Spent in the window ending now; sources with nothing in it are forgotten, so the map never outgrows `all`. */
  spent(source: string, now: number): { fromSource: number; fromAll: number } {
    while (this.#all.length > 0 && now - (this.#all[0] as { at: number }).at >= this.windowMs) {
      const { source: old } = this.#all.shift() as { source: string };
      const left = (this.#bySource.get(old) ?? 1) - 1;
      if (left > 0) this.#bySource.set(old, left);
      else this.#bySource.delete(old);
    }
    return { fromSource: this.#bySource.get(source) ?? 0, fromAll: this.#all.length };
  }

  spend(source: string, now: number): void {
    this.#all.push({ at: now, source });
    this.#bySource.set(source, (this.#bySource.get(source) ?? 0) + 1);
  }
}

/** How many distinct tokens (of each kind) and users are remembered; the least recently used go first. */
const CACHE_ENTRIES = 256;

interface Remembered<T> {
  at: number;
  value: T;
  ttlMs: number;
}

/** A bounded map of answers, least recently used first out; an expired answer stays until pushed out. */
class AnswerCache<T> {
  readonly #entries = new Map<string, Remembered<T>>();

  /** The entry, fresh or not; a use moves it to the back of the queue. */
  get(key: string): Remembered<T> | undefined {
    const entry = this.#entries.get(key);
    if (entry) {
      this.#entries.delete(key);
      this.#entries.set(key, entry);
    }
    return entry;
  }

  set(key: string, entry: Remembered<T>): void {
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    if (this.#entries.size > CACHE_ENTRIES) this.#entries.delete(this.#entries.keys().next().value as string);
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }
}

const fresh = <T>(entry: Remembered<T> | undefined, now: number) =>
  entry && now - entry.at < entry.ttlMs ? entry.value : undefined;

export interface AuthorizerOptions {
  ttls?: CacheTtls;
  budgets?: ReviewBudgets;
  /** TokenReview spec.audiences; empty: the API server's own. */
  audiences?: readonly string[];
  now?: () => number;
}

/** Decides each /metrics request from its Authorization header and source address, with cached reviews. */
export class MetricsAuthorizer {
  /** Token answers keyed by the token's SHA-256: the process never keeps a scraper's token. */
  readonly #authenticated = new AnswerCache<TokenReviewStatus>();
  /** Apart, so that made-up tokens, however many, never push an authenticated one out. */
  readonly #refused = new AnswerCache<TokenReviewStatus>();
  readonly #access = new AnswerCache<AccessReviewStatus>();
  /** Reviews in flight, shared by concurrent requests: one API call for a burst of scrapes. */
  readonly #pending = new Map<string, Promise<unknown>>();
  readonly #window: ReviewWindow;
  readonly reviewer: Reviewer;
  readonly ttls: CacheTtls;
  readonly budgets: ReviewBudgets;
  readonly audiences: readonly string[];
  readonly now: () => number;
  constructor(reviewer: Reviewer, options: AuthorizerOptions = {}) {
    this.reviewer = reviewer;
    this.ttls = options.ttls ?? DEFAULT_TTLS;
    this.budgets = options.budgets ?? REVIEW_BUDGETS;
    this.audiences = options.audiences ?? [];
    this.now = options.now ?? (() => performance.now());
    this.#window = new ReviewWindow(this.budgets.windowMs);
  }

  /** `source`: the client's address (IPv4-mapped IPv6 is read as IPv4, so one client is one source). */
  async decide(authorization: string | undefined, path: string, source: string, verb = "get"): Promise<Access> {
    const token = bearerToken(authorization);
    if (token === undefined) return { allowed: false, status: 401, rule: "bearer-token", reason: "no bearer token" };
    try {
      const reviewed = await this.#reviewToken(token, source.replace(/^::ffff:(?=\d+\.)/i, ""));
      if ("allowed" in reviewed) return reviewed;
      const user = decideAuthentication(reviewed, this.audiences);
      if ("allowed" in user) return user;
      const key = JSON.stringify([user.username, user.uid, user.groups, user.extra, path, verb]);
      const status =
        fresh(this.#access.get(key), this.now()) ??
        (await this.#shared(`access ${key}`, async () => {
          const answer = await this.reviewer.reviewAccess(user, path, verb);
          const ttlMs = answer.allowed ? this.ttls.allowMs : this.ttls.denyMs;
          this.#access.set(key, { at: this.now(), value: answer, ttlMs });
          return answer;
        }));
      return decideAuthorization(user, status, path);
    } catch (err) {
      const reason = `reviewing the request failed: ${err instanceof Error ? err.message : String(err)}`;
      return { allowed: false, status: 500, rule: "review", reason };
    }
  }

  /** The token's review: remembered, shared with one in flight, or asked for if its budget allows. */
  async #reviewToken(token: string, source: string): Promise<TokenReviewStatus | Extract<Access, { allowed: false }>> {
    const key = createHash("sha256").update(token).digest("base64");
    const now = this.now();
    const known = this.#authenticated.get(key);
    const cached = fresh(known, now) ?? fresh(this.#refused.get(key), now);
    if (cached) return cached;
    const pending = this.#pending.get(`token ${key}`) as Promise<TokenReviewStatus> | undefined;
    if (pending) return pending; // shared before the budget: a burst of scrapes spends one review
    const decision = decideReview({ source, renewal: known !== undefined, ...this.#window.spent(source, now) }, this.budgets);
    if (!("review" in decision)) return decision;
    if (decision.counted) this.#window.spend(source, now);
    return this.#shared(`token ${key}`, async () => {
      const answer = await this.reviewer.reviewToken(token, this.audiences);
      const at = this.now();
      if (answer.authenticated) {
        this.#refused.delete(key);
        this.#authenticated.set(key, { at, value: answer, ttlMs: this.ttls.tokenMs });
      } else {
        this.#authenticated.delete(key); // revoked or expired: its next review is budgeted again
        this.#refused.set(key, { at, value: answer, ttlMs: this.ttls.tokenDeniedMs });
      }
      return answer;
    });
  }

  /** One call per key at a time; a failure is not remembered, so the next request asks again. */
  #shared<T>(key: string, call: () => Promise<T>): Promise<T> {
    const pending = this.#pending.get(key) as Promise<T> | undefined;
    if (pending) return pending;
    const promise = call().finally(() => this.#pending.delete(key));
    this.#pending.set(key, promise);
    return promise;
  }
}

/** The reviews as API calls (the program's ServiceAccount needs create on tokenreviews and subjectaccessreviews). */
export function apiReviewer(client: KubeClient): Reviewer {
  return {
    async reviewToken(token, audiences) {
      const review = await client.request<{ status?: TokenReviewStatus }>({
        method: "POST",
        path: "/apis/authentication.k8s.io/v1/tokenreviews",
        verb: "create",
        idempotent: true, // a review changes nothing
        body: {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenReview",
          spec: { token, ...(audiences.length > 0 ? { audiences } : {}) },
        },
      });
      return review.status ?? {};
    },
    async reviewAccess(user, path, verb) {
      const review = await client.request<{ status?: AccessReviewStatus }>({
        method: "POST",
        path: "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        verb: "create",
        idempotent: true,
        body: {
          apiVersion: "authorization.k8s.io/v1",
          kind: "SubjectAccessReview",
          spec: {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            nonResourceAttributes: { path, verb },
          },
        },
      });
      return review.status ?? { allowed: false, reason: "no status in the SubjectAccessReview" };
    },
  };
}
