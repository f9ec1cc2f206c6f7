import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import {
  type Access,
  type AccessReviewStatus,
  bearerToken,
  decideAuthentication,
  decideAuthorization,
  decideReview,
  MetricsAuthorizer,
  REVIEW_BUDGETS,
  type Reviewer,
  type TokenReviewStatus,
  type UserInfo,
} from "./metricsauth.ts";

describe("bearerToken reads the header as the API server's bearer token authenticator does", () => {
  const cases: [string | undefined, string | undefined][] = [
    ["Bearer abc", "abc"],
    ["bearer abc", "abc"],
    ["BEARER abc", "abc"],
    ["  Bearer abc  ", "abc"], // trimmed
    ["Bearer abc def", "abc"], // a third part is ignored
    ["Bearer  abc", undefined], // two spaces: the token part is empty
    ["Bearer", undefined],
    ["Bearer ", undefined],
    ["Basic YWxhZGRpbjpvcGVuc2VzYW1l", undefined],
    ["Bearerabc", undefined],
    ["", undefined],
    [undefined, undefined],
  ];
  for (const [header, token] of cases) {
    test(`${JSON.stringify(header)} → ${JSON.stringify(token)}`, () => assert.equal(bearerToken(header), token));
  }
});

describe("the decisions name their rule and the value refused", () => {
  test("an unauthenticated token is 401 with the API server's error", () => {
    assert.deepEqual(decideAuthentication({ authenticated: false, error: "token has expired" }), {
      allowed: false,
      status: 401,
      rule: "authentication",
      reason: "token not authenticated: token has expired",
    });
    // Authenticated without a user name counts as not authenticated.
    assert.equal((decideAuthentication({ authenticated: true, user: {} }) as { status: number }).status, 401);
    const user = { username: "system:serviceaccount:monitoring:prometheus", groups: ["system:serviceaccounts"] };
    assert.deepEqual(decideAuthentication({ authenticated: true, user }), user);
  });

  test("with audiences asked for, the review must name one of them (rule audience)", () => {
    const user = { username: "prom" };
    const refused = {
      allowed: false,
      status: 401,
      rule: "audience",
      reason: 'token not valid for audience "local-ccm-metrics"',
    };
    assert.deepEqual(decideAuthentication({ authenticated: true, user }, ["local-ccm-metrics"]), refused);
    assert.deepEqual(decideAuthentication({ authenticated: true, user, audiences: ["api"] }, ["local-ccm-metrics"]), refused);
    assert.deepEqual(decideAuthentication({ authenticated: true, user, audiences: ["local-ccm-metrics"] }, ["local-ccm-metrics"]), user);
    // None asked for: the API server checked its own, whatever it names.
    assert.deepEqual(decideAuthentication({ authenticated: true, user, audiences: ["api"] }), user);
  });

  test("decideReview: a renewal always, uncounted; else the source's budget, then the whole one", () => {
    const budgets = { perSource: 2, all: 3, windowMs: 60_000 };
    const ask = (renewal: boolean, fromSource: number, fromAll: number) =>
      decideReview({ source: "10.0.0.9", renewal, fromSource, fromAll }, budgets);
    assert.deepEqual(ask(true, 2, 3), { review: true, counted: false, rule: "renewal" });
    assert.deepEqual(ask(false, 1, 2), { review: true, counted: true, rule: "budget" });
    assert.deepEqual(ask(false, 2, 2), {
      allowed: false,
      status: 429,
      rule: "review-rate-source",
      reason: "too many new tokens from 10.0.0.9: at most 2 reviewed a minute",
    });
    assert.deepEqual(ask(false, 1, 3), {
      allowed: false,
      status: 429,
      rule: "review-rate",
      reason: "too many new tokens: at most 3 reviewed a minute",
    });
  });

  test("a user without the grant is 403 naming the user, the path and RBAC's reason", () => {
    assert.deepEqual(decideAuthorization({ username: "bob" }, { allowed: false, reason: "no RBAC policy matched" }, "/metrics"), {
      allowed: false,
      status: 403,
      rule: "authorization",
      reason: 'user "bob" may not get /metrics: no RBAC policy matched',
    });
    // A deny from an authorizer wins even over allowed (the API server never sends both, but never trust it).
    assert.equal(decideAuthorization({ username: "bob" }, { allowed: true, denied: true }, "/metrics").allowed, false);
    assert.deepEqual(decideAuthorization({ username: "prom" }, { allowed: true }, "/metrics"), { allowed: true, user: "prom" });
  });
});

/** 200 for an allowed request, else the refusal's status. */
const statusOf = (access: Access) => (access.allowed ? 200 : access.status);
const ruleOf = (access: Access) => (access.allowed ? undefined : access.rule);

/** A reviewer answering from tables, counting its calls. */
function fakeReviewer(tokens: Record<string, UserInfo>, allowed: Set<string>) {
  const calls = { token: 0, access: 0 };
  let fail = false;
  const reviewer: Reviewer = {
    async reviewToken(token, audiences): Promise<TokenReviewStatus> {
      calls.token++;
      if (fail) throw new Error("connection refused");
      const user = tokens[token];
      if (!user) return { authenticated: false, error: "invalid bearer token" };
      return { authenticated: true, user, audiences: audiences.length > 0 ? [...audiences] : ["https://kubernetes.default.svc"] };
    },
    async reviewAccess(user, path, verb): Promise<AccessReviewStatus> {
      calls.access++;
      if (fail) throw new Error("connection refused");
      return { allowed: path === "/metrics" && verb === "get" && allowed.has(user.username ?? "") };
    },
  };
  return { reviewer, calls, setFailing: (value: boolean) => (fail = value) };
}

describe("MetricsAuthorizer", () => {
  const users = { "t-prom": { username: "prom", uid: "1" }, "t-bob": { username: "bob", uid: "2" } };
  const ttls = { tokenMs: 60_000, tokenDeniedMs: 10_000, allowMs: 60_000, denyMs: 10_000 };
  const PROM = "10.0.0.2"; // the scraper's address
  const OTHER = "10.0.0.66";

  test("401 without a token (no API call), 401 for an unknown one, 403 without the grant, allowed with it", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => 0 });
    assert.deepEqual(await authorizer.decide(undefined, "/metrics", PROM), {
      allowed: false,
      status: 401,
      rule: "bearer-token",
      reason: "no bearer token",
    });
    assert.deepEqual(calls, { token: 0, access: 0 });
    assert.equal((await authorizer.decide("Bearer nope", "/metrics", PROM)).allowed, false);
    assert.deepEqual(calls, { token: 1, access: 0 });
    assert.deepEqual(await authorizer.decide("Bearer t-bob", "/metrics", PROM), {
      allowed: false,
      status: 403,
      rule: "authorization",
      reason: 'user "bob" may not get /metrics',
    });
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics", PROM), { allowed: true, user: "prom" });
  });

  test("a scrape every 15 s for 10 minutes costs one review of each kind per minute", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => now });
    for (now = 0; now < 600_000; now += 15_000) {
      assert.equal((await authorizer.decide("Bearer t-prom", "/metrics", PROM)).allowed, true);
    }
    assert.deepEqual(calls, { token: 10, access: 10 });
  });

  test("denials are remembered for a shorter time, so a new grant takes effect soon", async () => {
    const granted = new Set<string>();
    const { reviewer, calls } = fakeReviewer(users, granted);
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => now });
    assert.equal((await authorizer.decide("Bearer t-bob", "/metrics", PROM)).allowed, false);
    granted.add("bob");
    now = 9_999;
    assert.equal((await authorizer.decide("Bearer t-bob", "/metrics", PROM)).allowed, false);
    now = 10_000;
    assert.equal((await authorizer.decide("Bearer t-bob", "/metrics", PROM)).allowed, true);
    assert.deepEqual(calls, { token: 1, access: 2 });
  });

  test("concurrent scrapes share one review in flight", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => 0 });
    const answers = await Promise.all(Array.from({ length: 20 }, () => authorizer.decide("Bearer t-prom", "/metrics", PROM)));
    assert.ok(answers.every((answer) => answer.allowed));
    assert.deepEqual(calls, { token: 1, access: 1 });
  });

  test("a failed review is 500 and not remembered: the next scrape asks again", async () => {
    const { reviewer, calls, setFailing } = fakeReviewer(users, new Set(["prom"]));
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => 0 });
    setFailing(true);
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics", PROM), {
      allowed: false,
      status: 500,
      rule: "review",
      reason: "reviewing the request failed: connection refused",
    });
    setFailing(false);
    assert.equal((await authorizer.decide("Bearer t-prom", "/metrics", PROM)).allowed, true);
    assert.deepEqual(calls, { token: 2, access: 1 });
  });

  test("made-up tokens: each reviewed once per period, 20 new ones a minute per source, 60 in all", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => now });
    // 1000 requests with 15 tokens: each reviewed once while its answer is remembered (10 s for a refusal).
    for (let i = 0; i < 1000; i++) await authorizer.decide(`Bearer junk-${i % 15}`, "/metrics", OTHER);
    assert.equal(calls.token, 15);
    // The source's 21st new token within the minute is refused without a review; other sources still have room.
    for (let i = 0; i < 5; i++) await authorizer.decide(`Bearer new-${i}`, "/metrics", OTHER);
    assert.equal(calls.token, 20);
    assert.deepEqual(await authorizer.decide("Bearer new-5", "/metrics", OTHER), {
      allowed: false,
      status: 429,
      rule: "review-rate-source",
      reason: "too many new tokens from 10.0.0.66: at most 20 reviewed a minute",
    });
    assert.equal(calls.token, 20);
    // IPv4-mapped IPv6 (a dual-stack listener's view of an IPv4 client) is the same source.
    assert.equal(statusOf(await authorizer.decide("Bearer new-6", "/metrics", "::ffff:10.0.0.66")), 429);
    for (let source = 1; source <= 2; source++) {
      for (let i = 0; i < 20; i++) await authorizer.decide(`Bearer s${source}-${i}`, "/metrics", `10.1.0.${source}`);
    }
    assert.equal(calls.token, 60);
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics", PROM), {
      allowed: false,
      status: 429,
      rule: "review-rate",
      reason: "too many new tokens: at most 60 reviewed a minute",
    });
    now = 59_999;
    assert.equal((await authorizer.decide("Bearer t-prom", "/metrics", PROM)).allowed, false);
    now = 60_000;
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics", PROM), { allowed: true, user: "prom" });
    assert.equal(calls.token, 61);
  });

  test("a token once authenticated is reviewed again outside the budgets, and only while it still authenticates", async () => {
    const tokens: Record<string, UserInfo> = { ...users };
    const { reviewer, calls } = fakeReviewer(tokens, new Set(["prom"]));
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => now });
    assert.equal((await authorizer.decide("Bearer t-prom", "/metrics", PROM)).allowed, true);
    now = 30_000;
    for (let i = 0; i < 60; i++) await authorizer.decide(`Bearer junk-${i}`, "/metrics", `10.2.0.${i}`);
    assert.equal(calls.token, 60); // t-prom's and 59 junk: the 60th junk token was refused
    now = 60_000; // t-prom's review left the window: room for one more, then none
    assert.equal(statusOf(await authorizer.decide("Bearer junk-60", "/metrics", "10.3.0.1")), 401);
    assert.equal(statusOf(await authorizer.decide("Bearer junk-61", "/metrics", "10.3.0.2")), 429);
    // t-prom's answer expired: renewed, though the budget is spent.
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics", PROM), { allowed: true, user: "prom" });
    assert.equal(calls.token, 62); // junk-60 and the renewal
    // Revoked: the renewal says so, and from then on the token is a stranger again (its review budgeted).
    delete tokens["t-prom"];
    now = 120_000;
    assert.equal(statusOf(await authorizer.decide("Bearer t-prom", "/metrics", PROM)), 401);
    now = 130_000;
    for (let i = 0; i < 20; i++) await authorizer.decide(`Bearer more-${i}`, "/metrics", PROM);
    assert.equal(ruleOf(await authorizer.decide("Bearer t-prom", "/metrics", PROM)), "review-rate-source");
  });

  test("the caches keep the last 256 tokens of each kind, least recently used first out", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    let now = 0;
    // Answers kept for hours: only the bound forgets them.
    const hours = { tokenMs: 36_000_000, tokenDeniedMs: 36_000_000, allowMs: 60_000, denyMs: 10_000 };
    const authorizer = new MetricsAuthorizer(reviewer, { ttls: hours, now: () => now });
    await authorizer.decide("Bearer t-prom", "/metrics", PROM);
    for (let i = 0; i < 300; i++) {
      now = (i + 1) * 1001; // under 60 a minute, one a source
      await authorizer.decide(`Bearer token-${i}`, "/metrics", `10.4.${i >> 8}.${i & 255}`);
      if (i === 150) await authorizer.decide("Bearer token-0", "/metrics", PROM); // a use keeps it
    }
    assert.equal(calls.token, 301);
    now += 60_000;
    await authorizer.decide("Bearer token-299", "/metrics", PROM); // still remembered
    await authorizer.decide("Bearer token-0", "/metrics", PROM); // used at 150
    await authorizer.decide("Bearer token-45", "/metrics", PROM); // kept: token-0 and token-45 to token-299
    assert.equal(calls.token, 301);
    await authorizer.decide("Bearer token-44", "/metrics", PROM); // forgotten
    assert.equal(calls.token, 302);
    // 300 refused tokens pushed no authenticated one out.
    await authorizer.decide("Bearer t-prom", "/metrics", PROM);
    assert.equal(calls.token, 302);
  });
});

describe("the authorised scraper is never locked out by others", () => {
  const ttls = { tokenMs: 60_000, tokenDeniedMs: 10_000, allowMs: 60_000, denyMs: 10_000 };
  const PROM = "10.0.0.2";
  /** What the others send: a token (made-up, a real one of another user's, or the scraper's own), a source, a delay. */
  const attack = fc.array(
    fc.record({
      // "new": a token never sent before; junk-…: made-up ones that may repeat; real tokens of other users.
      token: fc.oneof(fc.constant("new"), fc.constant("new"), fc.string({ maxLength: 3 }).map((t) => `junk-${t}`), fc.constantFrom("t-bob", "t-eve")),
      source: fc.oneof(fc.constantFrom("10.0.0.66", "::ffff:10.0.0.66", "fd00::66"), fc.ipV4(), fc.ipV6()),
      // Bursts (most at once) and pauses, so that budgets run out and windows turn.
      afterMs: fc.oneof({ arbitrary: fc.nat({ max: 100 }), weight: 9 }, { arbitrary: fc.nat({ max: 60_000 }), weight: 1 }),
    }),
    { maxLength: 400, size: "max" },
  );
  const users = { "t-prom": { username: "prom" }, "t-bob": { username: "bob" }, "t-eve": { username: "eve" } };
  let sent = 0;
  const token = (kind: string) => (kind === "new" ? `new-${sent++}` : kind);

  test("once its token was reviewed, whatever others send from other addresses, every scrape is allowed", async () => {
    await fc.assert(
      fc.asyncProperty(attack, fc.integer({ min: 1_000, max: 60_000 }), async (requests, intervalMs) => {
        const { reviewer } = fakeReviewer(users, new Set(["prom", "bob"]));
        let now = 0;
        const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => now });
        assert.equal((await authorizer.decide("Bearer t-prom", "/metrics", PROM)).allowed, true);
        let nextScrape = intervalMs;
        for (const request of requests) {
          now += request.afterMs;
          if (request.source === PROM) continue; // others only
          while (nextScrape <= now) {
            const at = now;
            now = nextScrape;
            assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics", PROM), { allowed: true, user: "prom" });
            now = at;
            nextScrape += intervalMs;
          }
          await authorizer.decide(`Bearer ${token(request.token)}`, "/metrics", request.source);
        }
      }),
      { numRuns: 200 },
    );
  });

  test("one other address alone, whatever it sends, leaves the scraper room for a new token", async () => {
    await fc.assert(
      fc.asyncProperty(attack, async (requests) => {
        const { reviewer } = fakeReviewer({ ...users, "t-prom-2": { username: "prom" } }, new Set(["prom"]));
        let now = 0;
        const authorizer = new MetricsAuthorizer(reviewer, { ttls, now: () => now });
        for (const request of requests) {
          now += request.afterMs;
          await authorizer.decide(`Bearer ${token(request.token)}`, "/metrics", "10.0.0.66");
        }
        // Its projected token rotated: a token never seen, from its own address.
        assert.deepEqual(await authorizer.decide("Bearer t-prom-2", "/metrics", PROM), { allowed: true, user: "prom" });
      }),
      { numRuns: 200 },
    );
    assert.ok(REVIEW_BUDGETS.perSource < REVIEW_BUDGETS.all);
  });
});
