// Who may read /metrics over HTTPS: the Kubernetes convention of controller-runtime's secure metrics
// (filters.WithAuthenticationAndAuthorization) and kube-rbac-proxy. The scraper's bearer token is reviewed by the
// API server (authentication.k8s.io/v1 TokenReview), then the user it names is checked for `get` on the
// non-resource URL /metrics (authorization.k8s.io/v1 SubjectAccessReview). Both answers are cached briefly, so a
// scrape every 15-30 s costs about one review of each per cache period. Made-up tokens each need a TokenReview:
// new ones are limited to a number a minute, so anyone who reaches the port cannot turn it into load on the API
// server.
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
  reviewToken(token: string): Promise<TokenReviewStatus>;
  reviewAccess(user: UserInfo, path: string, verb: string): Promise<AccessReviewStatus>;
}

export type Access =
  | { allowed: true; user: string }
  /**
   * 401: no or an unauthenticated token; 403: a user without the grant; 429: too many new tokens to review;
   * 500: the reviews failed.
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

/** Rule "authentication": what a TokenReview's status means for the request. */
export function decideAuthentication(status: TokenReviewStatus): Access | UserInfo {
  if (!status.authenticated || !status.user?.username) {
    const why = status.error ? `: ${status.error}` : "";
    return { allowed: false, status: 401, rule: "authentication", reason: `token not authenticated${why}` };
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
  /** TokenReview answers, authenticated or not. */
  tokenMs: number;
  /** SubjectAccessReview answers that allow. */
  allowMs: number;
  /** SubjectAccessReview answers that deny: shorter, so a new grant takes effect soon. */
  denyMs: number;
}

export const DEFAULT_TTLS: CacheTtls = { tokenMs: 60_000, allowMs: 60_000, denyMs: 10_000 };

/** New tokens reviewed in any minute: a few Prometheus replicas need a few; more is someone trying tokens. */
export const TOKEN_REVIEWS_PER_MINUTE = 60;

class ReviewLimit extends Error {}

/** How many distinct tokens and users are remembered; the oldest go first. */
const CACHE_ENTRIES = 256;

/** A small TTL cache that also shares a review in flight, so concurrent scrapes cause one API call. */
class ReviewCache<T> {
  readonly #entries = new Map<string, { at: number; value: Promise<T>; ttlMs?: number }>();
  readonly now: () => number;
  constructor(now: () => number) {
    this.now = now;
  }

  get(key: string, review: () => Promise<T>, ttlOf: (value: T) => number): Promise<T> {
    const hit = this.#entries.get(key);
    if (hit && (hit.ttlMs === undefined || this.now() - hit.at < hit.ttlMs)) return hit.value;
    const entry: { at: number; value: Promise<T>; ttlMs?: number } = { at: this.now(), value: review() };
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    if (this.#entries.size > CACHE_ENTRIES) this.#entries.delete(this.#entries.keys().next().value as string);
    entry.value.then(
      (value) => {
        entry.ttlMs = ttlOf(value);
      },
      () => {
        if (this.#entries.get(key) === entry) this.#entries.delete(key); // a failed review is not remembered
      },
    );
    return entry.value;
  }
}

/** Decides each /metrics request from its Authorization header, with cached reviews. */
export class MetricsAuthorizer {
  readonly #tokens: ReviewCache<TokenReviewStatus>;
  readonly #access: ReviewCache<AccessReviewStatus>;
  /** When the token reviews of the last minute started. */
  readonly #recentReviews: number[] = [];
  readonly reviewer: Reviewer;
  readonly ttls: CacheTtls;
  readonly now: () => number;
  constructor(reviewer: Reviewer, ttls: CacheTtls = DEFAULT_TTLS, now: () => number = () => performance.now()) {
    this.reviewer = reviewer;
    this.ttls = ttls;
    this.now = now;
    this.#tokens = new ReviewCache(now);
    this.#access = new ReviewCache(now);
  }

  async decide(authorization: string | undefined, path: string, verb = "get"): Promise<Access> {
    const token = bearerToken(authorization);
    if (token === undefined) return { allowed: false, status: 401, rule: "bearer-token", reason: "no bearer token" };
    try {
      // The cache keys on a hash: the process never keeps a scraper's token.
      const key = createHash("sha256").update(token).digest("base64");
      const reviewed = await this.#tokens.get(key, () => this.#reviewToken(token), () => this.ttls.tokenMs);
      const user = decideAuthentication(reviewed);
      if ("allowed" in user) return user;
      const status = await this.#access.get(
        JSON.stringify([user.username, user.uid, user.groups, user.extra, path, verb]),
        () => this.reviewer.reviewAccess(user, path, verb),
        (answer) => (answer.allowed ? this.ttls.allowMs : this.ttls.denyMs),
      );
      return decideAuthorization(user, status, path);
    } catch (err) {
      if (err instanceof ReviewLimit) return { allowed: false, status: 429, rule: "review-rate", reason: err.message };
      const reason = `reviewing the request failed: ${err instanceof Error ? err.message : String(err)}`;
      return { allowed: false, status: 500, rule: "review", reason };
    }
  }

  /** A TokenReview, unless the last minute already had TOKEN_REVIEWS_PER_MINUTE (a refusal is not cached). */
  #reviewToken(token: string): Promise<TokenReviewStatus> {
    const now = this.now();
    while (this.#recentReviews.length > 0 && now - (this.#recentReviews[0] as number) >= 60_000) this.#recentReviews.shift();
    if (this.#recentReviews.length >= TOKEN_REVIEWS_PER_MINUTE) {
      return Promise.reject(new ReviewLimit(`too many new tokens: at most ${TOKEN_REVIEWS_PER_MINUTE} reviewed a minute`));
    }
    this.#recentReviews.push(now);
    return this.reviewer.reviewToken(token);
  }
}

/** The reviews as API calls (the program's ServiceAccount needs create on tokenreviews and subjectaccessreviews). */
export function apiReviewer(client: KubeClient): Reviewer {
  return {
    async reviewToken(token) {
      const review = await client.request<{ status?: TokenReviewStatus }>({
        method: "POST",
        path: "/apis/authentication.k8s.io/v1/tokenreviews",
        verb: "create",
        idempotent: true, // a review changes nothing
        body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token } },
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
