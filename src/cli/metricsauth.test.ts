import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  type AccessReviewStatus,
  bearerToken,
  decideAuthentication,
  decideAuthorization,
  MetricsAuthorizer,
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

/** A reviewer answering from tables, counting its calls. */
function fakeReviewer(tokens: Record<string, UserInfo>, allowed: Set<string>) {
  const calls = { token: 0, access: 0 };
  let fail = false;
  const reviewer: Reviewer = {
    async reviewToken(token): Promise<TokenReviewStatus> {
      calls.token++;
      if (fail) throw new Error("connection refused");
      const user = tokens[token];
      return user ? { authenticated: true, user } : { authenticated: false, error: "invalid bearer token" };
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
  const ttls = { tokenMs: 60_000, allowMs: 60_000, denyMs: 10_000 };

  test("401 without a token (no API call), 401 for an unknown one, 403 without the grant, allowed with it", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    const authorizer = new MetricsAuthorizer(reviewer, ttls, () => 0);
    assert.deepEqual(await authorizer.decide(undefined, "/metrics"), {
      allowed: false,
      status: 401,
      rule: "bearer-token",
      reason: "no bearer token",
    });
    assert.deepEqual(calls, { token: 0, access: 0 });
    assert.equal((await authorizer.decide("Bearer nope", "/metrics")).allowed, false);
    assert.deepEqual(calls, { token: 1, access: 0 });
    assert.deepEqual(await authorizer.decide("Bearer t-bob", "/metrics"), {
      allowed: false,
      status: 403,
      rule: "authorization",
      reason: 'user "bob" may not get /metrics',
    });
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics"), { allowed: true, user: "prom" });
  });

  test("a scrape every 15 s for 10 minutes costs one review of each kind per minute", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, ttls, () => now);
    for (now = 0; now < 600_000; now += 15_000) {
      assert.equal((await authorizer.decide("Bearer t-prom", "/metrics")).allowed, true);
    }
    assert.deepEqual(calls, { token: 10, access: 10 });
  });

  test("denials are remembered for a shorter time, so a new grant takes effect soon", async () => {
    const granted = new Set<string>();
    const { reviewer, calls } = fakeReviewer(users, granted);
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, ttls, () => now);
    assert.equal((await authorizer.decide("Bearer t-bob", "/metrics")).allowed, false);
    granted.add("bob");
    now = 9_999;
    assert.equal((await authorizer.decide("Bearer t-bob", "/metrics")).allowed, false);
    now = 10_000;
    assert.equal((await authorizer.decide("Bearer t-bob", "/metrics")).allowed, true);
    assert.deepEqual(calls, { token: 1, access: 2 });
  });

  test("concurrent scrapes share one review in flight", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    const authorizer = new MetricsAuthorizer(reviewer, ttls, () => 0);
    const answers = await Promise.all(Array.from({ length: 20 }, () => authorizer.decide("Bearer t-prom", "/metrics")));
    assert.ok(answers.every((answer) => answer.allowed));
    assert.deepEqual(calls, { token: 1, access: 1 });
  });

  test("a failed review is 500 and not remembered: the next scrape asks again", async () => {
    const { reviewer, calls, setFailing } = fakeReviewer(users, new Set(["prom"]));
    const authorizer = new MetricsAuthorizer(reviewer, ttls, () => 0);
    setFailing(true);
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics"), {
      allowed: false,
      status: 500,
      rule: "review",
      reason: "reviewing the request failed: connection refused",
    });
    setFailing(false);
    assert.equal((await authorizer.decide("Bearer t-prom", "/metrics")).allowed, true);
    assert.deepEqual(calls, { token: 2, access: 1 });
  });

  test("made-up tokens: each reviewed once per period, at most 60 new ones a minute, the cache bounded", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    let now = 0;
    const authorizer = new MetricsAuthorizer(reviewer, ttls, () => now);
    for (let i = 0; i < 1000; i++) await authorizer.decide(`Bearer junk-${i % 50}`, "/metrics");
    assert.equal(calls.token, 50);
    // The 61st new token within the minute is refused without a review; the next minute has room again.
    for (let i = 0; i < 10; i++) assert.equal((await authorizer.decide(`Bearer new-${i}`, "/metrics")).allowed, false);
    assert.equal(calls.token, 60);
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics"), {
      allowed: false,
      status: 429,
      rule: "review-rate",
      reason: "too many new tokens: at most 60 reviewed a minute",
    });
    now = 59_999;
    assert.equal((await authorizer.decide("Bearer t-prom", "/metrics")).allowed, false);
    now = 60_000;
    assert.deepEqual(await authorizer.decide("Bearer t-prom", "/metrics"), { allowed: true, user: "prom" });
    assert.equal(calls.token, 61);
  });

  test("the cache keeps the last 256 tokens, the oldest go first", async () => {
    const { reviewer, calls } = fakeReviewer(users, new Set(["prom"]));
    let now = 0;
    // Answers kept for hours: only the bound forgets them.
    const authorizer = new MetricsAuthorizer(reviewer, { tokenMs: 36_000_000, allowMs: 60_000, denyMs: 10_000 }, () => now);
    for (let i = 0; i < 300; i++) {
      now = i * 1000; // 60 a minute, within the rate
      await authorizer.decide(`Bearer token-${i}`, "/metrics");
    }
    assert.equal(calls.token, 300);
    now += 60_000;
    await authorizer.decide("Bearer token-299", "/metrics"); // still remembered
    await authorizer.decide("Bearer token-44", "/metrics"); // the 256 kept are token-44 to token-299
    assert.equal(calls.token, 300);
    await authorizer.decide("Bearer token-43", "/metrics"); // forgotten
    assert.equal(calls.token, 301);
  });
});
