import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { formatDuration, formatDurationNs, parseDuration, parseDurationNs } from "./duration.ts";

describe("parseDuration", () => {
  const cases: [string, number][] = [
    ["0", 0],
    ["+0", 0],
    ["10s", 10_000],
    ["1m30s", 90_000],
    ["1h", 3_600_000],
    ["500ms", 500],
    ["1.5s", 1500],
    [".5s", 500],
    ["1.s", 1000],
    ["2h45m", 9_900_000],
    ["1h2m3s4ms", 3_723_004],
    ["1500us", 1.5],
    ["1500µs", 1.5],
    ["1500μs", 1.5],
    ["2000000ns", 2],
    ["0.1s", 100],
    ["-2s", -2000],
    ["+2s", 2000],
  ];
  for (const [text, ms] of cases) test(`${text} → ${ms} ms`, () => assert.equal(parseDuration(text), ms));

  for (const text of ["", "10", "s", "1x", "abc", "1 s", "1s ", "-", ".s", "1.2.3s", "1S", "1d", "--1s"]) {
    test(`"${text}" is not a duration`, () => assert.equal(parseDuration(text), undefined));
  }
});

test("durations print as Go prints them", () => {
  const cases: [number, string][] = [
    [0, "0s"],
    [500, "500ms"],
    [1500, "1.5s"],
    [130_000, "2m10s"],
    [300_000, "5m0s"],
    [3_600_000, "1h0m0s"],
    [3_661_250, "1h1m1.25s"],
    [-2000, "-2s"],
  ];
  for (const [ms, text] of cases) assert.equal(formatDuration(ms), text);
});

// Each case is a disagreement the Go oracle (test/oracle/duration.test.ts) found in the earlier reader, which added
// floating-point milliseconds: Go's reading wins.
describe("as time.ParseDuration reads them: whole nanoseconds, fractions truncated, nothing past 2^63 ns", () => {
  const cases: [string, bigint | undefined][] = [
    ["0037.5363ns379us", 379_037n], // 37.5363ns is 37ns, not 38
    ["1.9ns", 1n],
    ["0.3333333333s", 333_333_333n],
    ["9223372036854775807ns", 2n ** 63n - 1n],
    ["-9223372036854775808ns", -(2n ** 63n)],
    ["9223372036854775808ns", undefined],
    ["9223372036854775808μs", undefined],
    ["2562047h47m16.854775807s", 2n ** 63n - 1n],
    ["2562048h", undefined],
    ["1ms0002.24m9348329860649082348ms086µs", undefined],
    ["1.00000000000000000000000000001h", 3_600_000_000_000n], // digits past 2^63 are dropped, not refused
  ];
  for (const [text, ns] of cases) test(`${text} → ${ns} ns`, () => assert.equal(parseDurationNs(text), ns));
});

test("durations below a millisecond print as Go prints them", () => {
  const cases: [bigint, string][] = [
    [1n, "1ns"],
    [1_500n, "1.5µs"],
    [1_234_567n, "1.234567ms"],
    [-(2n ** 63n), "-2562047h47m16.854775808s"],
  ];
  for (const [ns, text] of cases) assert.equal(formatDurationNs(ns), text);
  assert.equal(formatDuration(0.0015), "1.5µs");
});
