// Durations (every duration flag) read by src/cli/duration.ts and by Go's time.ParseDuration, and printed by
// both (time.Duration.String), on generated text: units, fractions, signs, leading zeros, overflow, spaces.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { formatDuration, formatDurationNs, parseDuration, parseDurationNs } from "../../src/cli/duration.ts";
import { type Oracle, startOracle } from "./oracle.ts";

// Fixed so CI runs the same cases every time; fast-check prints the seed and path of a failure.
const seed = Number(process.env.ORACLE_SEED ?? 20261124);
const numRuns = 4000;

interface GoAnswer {
  error?: string;
  ns?: string;
  string?: string;
}

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

const seen = { accepted: 0, refused: 0, overflow: 0 };

async function agree(text: string): Promise<void> {
  const go = await oracle.ask<GoAnswer>("duration", text);
  const ns = parseDurationNs(text);
  const context = `${JSON.stringify(text)}: Go ${go.error ?? go.ns}, ours ${ns}`;
  if (go.error !== undefined) {
    seen.refused++;
    if (/invalid duration/.test(go.error) && /\d{19}/.test(text)) seen.overflow++;
    assert.equal(ns, undefined, context);
    assert.equal(parseDuration(text), undefined, context);
    return;
  }
  seen.accepted++;
  assert.equal(ns, BigInt(go.ns ?? ""), context);
  assert.equal(parseDuration(text), Number(BigInt(go.ns ?? "")) / 1e6, context);
  assert.equal(formatDurationNs(ns), go.string, context);
}

const digits = (min: number, max: number) =>
  fc.string({ unit: fc.constantFrom(..."0123456789"), minLength: min, maxLength: max });
// Short numbers mostly; long ones reach the 2^63 ns limit (about 9.2e18 ns, 2562047 h).
const integer = fc.oneof(
  { weight: 6, arbitrary: digits(1, 3) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom("0", "00", "000"), digits(1, 3)).map(([a, b]) => a + b) },
  { weight: 2, arbitrary: digits(7, 21) },
  { weight: 1, arbitrary: fc.constantFrom("9223372036854775807", "9223372036854775808", "2562047", "2562048") },
);
const number = fc.oneof(
  { weight: 5, arbitrary: integer },
  { weight: 2, arbitrary: fc.tuple(integer, digits(0, 4)).map(([a, b]) => `${a}.${b}`) },
  { weight: 1, arbitrary: digits(0, 25).map((b) => `.${b}`) },
  { weight: 1, arbitrary: fc.tuple(integer, digits(19, 30)).map(([a, b]) => `${a}.${b}`) },
);
const unit = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom("ns", "us", "µs", "μs", "ms", "s", "m", "h") },
  { weight: 1, arbitrary: fc.constantFrom("", "d", "S", "H", "Ms", "µ", "sec", "mss", " s", "s ", "e3s") },
);
const part = fc.tuple(number, unit).map(([n, u]) => n + u);
const sign = fc.oneof(
  { weight: 8, arbitrary: fc.constant("") },
  { weight: 4, arbitrary: fc.constantFrom("-", "+") },
  { weight: 1, arbitrary: fc.constantFrom("--", "+-", " -") },
);
const tail = fc.oneof({ weight: 8, arbitrary: fc.constant("") }, fc.constantFrom(" ", "\t", ".", "0"));
const grammar = fc
  .tuple(sign, fc.array(part, { minLength: 1, maxLength: 4 }), tail)
  .map(([s, parts, tail]) => s + parts.join("") + tail);
const edges = fc.constantFrom("", "0", "+0", "-0", "00", "0.", ".", "-", "+", "0s0", "1s1", "1.s", ".5s", "-.s", " 1s");
const randomText = fc.string({
  unit: fc.oneof(fc.constantFrom(..."0123456789.+-nsuµμmh "), fc.string({ minLength: 1, maxLength: 1 })),
  maxLength: 12,
});

test("time.ParseDuration and ours accept the same text, to the same nanosecond, and print it alike", async () => {
  const text = fc.oneof({ weight: 8, arbitrary: grammar }, { weight: 1, arbitrary: edges }, randomText);
  await fc.assert(fc.asyncProperty(text, agree), { seed, numRuns });
  console.log("duration cases:", seen);
  assert.ok(seen.accepted > numRuns / 4 && seen.refused > numRuns / 10 && seen.overflow > 20, JSON.stringify(seen));
});

test("Duration.String and ours print any int64 of nanoseconds alike, and milliseconds as their ns", async () => {
  const int64 = fc.oneof(
    fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
    fc.bigInt({ min: -(10n ** 12n), max: 10n ** 12n }),
    fc.integer({ min: -1_000_000, max: 1_000_000 }).map(BigInt),
    fc.constantFrom(-(2n ** 63n), 2n ** 63n - 1n, 0n, 999n, 1000n, 999_999n, 10n ** 9n - 1n, 60n * 10n ** 9n),
  );
  await fc.assert(
    fc.asyncProperty(int64, async (ns) => {
      const go = await oracle.ask<GoAnswer>("duration-string", String(ns));
      assert.equal(formatDurationNs(ns), go.string, String(ns));
      if (ns % 1_000_000n === 0n && ns <= 2n ** 53n && ns >= -(2n ** 53n))
        assert.equal(formatDuration(Number(ns / 1_000_000n)), go.string, String(ns));
    }),
    { seed, numRuns },
  );
});
