// The client's decisions without the network: per-request bounds, what counts as a failing service,
// who is asked again, and the agent's retry schedule between lookups (with a lookup and a clock of
// our own). Requests themselves are tested against real services in test/agent/metadata.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { backoffDelay } from "../../time/backoff.ts";
import {
  askAgain,
  InstanceMetadataSource,
  isServerFailure,
  type Lookup,
  type lookupOnce,
  requestBound,
  ROUND_BACKOFF,
} from "./client.ts";

describe("requestBound", () => {
  test("a request gets 2 s, or what is left of the lookup", () => {
    assert.deepEqual(requestBound(1000, 11_000), { ms: 2000, missed: "within 2000 ms" });
    assert.deepEqual(requestBound(1000, 3000), { ms: 2000, missed: "within 2000 ms" });
    assert.deepEqual(requestBound(1000, 1800), { ms: 800, missed: "before --metadata-timeout" });
    assert.deepEqual(requestBound(1000, 900), { ms: 0, missed: "before --metadata-timeout" });
  });

  test("never past the lookup's deadline, and worded the same however much was left", () => {
    fc.assert(
      fc.property(fc.nat(10_000_000), fc.integer({ min: -5000, max: 20_000 }), (now, left) => {
        const { ms, missed } = requestBound(now, now + left);
        assert.ok(ms >= 0 && ms <= 2000 && ms <= Math.max(0, left));
        assert.equal(missed, left >= 2000 ? "within 2000 ms" : "before --metadata-timeout");
      }),
    );
  });
});

describe("isServerFailure", () => {
  const cases: [number, boolean][] = [
    [500, true],
    [502, true],
    [503, true],
    [599, true],
    [200, false],
    [400, false], // Azure without its header: not this provider's way of asking
    [401, false], // IMDSv2 without a token
    [403, false], // GCE without Metadata-Flavor
    [404, false],
  ];
  for (const [status, failing] of cases)
    test(`HTTP ${status}: ${failing ? "the service failing" : "an answer"}`, () =>
      assert.equal(isServerFailure(status), failing));
});

describe("askAgain", () => {
  const cases: [Parameters<typeof askAgain>[0], Parameters<typeof askAgain>[1], boolean][] = [
    ["aws", "down", true],
    ["aws", "not-this", true], // configured: a service still starting may refuse connections
    ["auto", "down", true],
    ["auto", "not-this", false], // another format, or nothing listening: not this node's provider
  ];
  for (const [mode, failure, again] of cases)
    test(`${mode}, ${failure}: ${again ? "asked again" : "given up"}`, () =>
      assert.equal(askAgain(mode, failure), again));
});

const unavailable: Lookup = { status: "unavailable", reason: "aws instance metadata did not answer within 3000 ms" };
const found: Lookup = { status: "found", provider: "aws", metadata: { providerID: "aws:///eu-central-1a/i-1" } };

/** A source whose lookups answer `answers` in turn (the last one repeated), on a clock the test moves. */
function scripted(answers: Lookup[], mode: "aws" | "auto" = "aws") {
  const clock = { now: 0 };
  const asked: string[] = [];
  const seen: Lookup[] = [];
  const ask: typeof lookupOnce = async (askedMode, boundMs) => {
    asked.push(`${askedMode} ${boundMs}`);
    return answers[Math.min(asked.length - 1, answers.length - 1)] as Lookup;
  };
  const source = new InstanceMetadataSource(mode, 3000, { ask, now: () => clock.now, onLookup: (l) => seen.push(l) });
  return { source, clock, asked, seen };
}

describe("pauses between the rounds of one lookup", () => {
  test("grow: from 100-200 ms to 1-2 s, the fourth at least three times the first whatever the jitter", (t) => {
    const jitters = fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), {
      minLength: 6,
      maxLength: 6,
    });
    fc.assert(
      fc.property(jitters, (draws) => {
        const random = t.mock.method(Math, "random", () => draws[random.mock.callCount()] as number);
        try {
          const pauses = draws.map((_, round) => backoffDelay(round, ROUND_BACKOFF));
          for (const [round, pause] of pauses.entries()) {
            const ceiling = Math.min(2000, 200 * 2 ** round);
            assert.ok(pause >= ceiling / 2 && pause <= ceiling, `round ${round}: ${pause} ms`);
          }
          // A fixed interval, even jittered by half, keeps the longest pause under twice the shortest.
          assert.ok((pauses[3] as number) >= 3 * (pauses[0] as number), `pauses ${pauses.join(", ")} ms`);
        } finally {
          random.mock.restore();
        }
      }),
    );
  });
});

describe("InstanceMetadataSource", () => {
  test("an answer is kept for good: the service is asked once", async () => {
    const { source, clock, asked, seen } = scripted([found, unavailable]);
    for (const at of [0, 1, 60_000, 86_400_000]) {
      clock.now = at;
      assert.deepEqual(await source.lookup(), found);
    }
    assert.deepEqual(asked, ["aws 3000"]);
    assert.deepEqual(seen, [found]);
  });

  test("auto finding nothing is kept too: rules and template apply from then on", async () => {
    const skipped: Lookup = { status: "skipped", reason: "no instance metadata service answered" };
    const { source, clock, asked } = scripted([skipped, found], "auto");
    await source.lookup();
    clock.now = 600_000;
    assert.deepEqual(await source.lookup(), skipped);
    assert.deepEqual(asked, ["auto 3000"]);
  });

  test("none never asks", async () => {
    const asked: number[] = [];
    const ask: typeof lookupOnce = async () => {
      asked.push(1);
      return found;
    };
    const source = new InstanceMetadataSource("none", 3000, { ask });
    assert.deepEqual(await source.lookup(), { status: "skipped", reason: "--instance-metadata=none" });
    assert.deepEqual(asked, []);
  });

  test("after a failure: the same answer until the backoff has passed, pauses doubling from 1 s to 5 min", async () => {
    const failures = 14;
    const { source, clock, asked, seen } = scripted([...Array<Lookup>(failures).fill(unavailable), found]);
    assert.deepEqual(await source.lookup(), unavailable);
    for (let failure = 0; failure < failures; failure++) {
      const ceiling = Math.min(300_000, 1000 * 2 ** failure); // as docs/node-addresses.md promises
      const failedAt = clock.now;
      // Jitter keeps each pause within [ceiling / 2, ceiling]: before half of it, nobody is asked.
      clock.now = failedAt + ceiling / 2 - 1;
      assert.deepEqual(await source.lookup(), unavailable);
      assert.equal(asked.length, failure + 1, `asked again ${ceiling / 2 - 1} ms after failure ${failure + 1}`);
      clock.now = failedAt + ceiling;
      await source.lookup();
      assert.equal(asked.length, failure + 2, `not asked again ${ceiling} ms after failure ${failure + 1}`);
    }
    assert.deepEqual(seen.at(-1), found);
    assert.equal(seen.length, failures + 1, "each lookup that asked is seen once (the metric)");
  });
});
