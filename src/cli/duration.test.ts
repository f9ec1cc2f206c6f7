import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { formatDuration, parseDuration } from "./duration.ts";

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
