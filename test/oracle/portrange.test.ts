// --lb-node-port-range read by src/service/flags.ts and by kube-apiserver's reader of --service-node-port-range
// (utilnet.PortRange.Set) on generated text: the three notations, signs, spaces (Go's idea of them), leading zeros,
// large numbers. Go's empty range (size 0) is what kube-apiserver replaces with its default, as ours does.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { DEFAULT_NODE_PORT_RANGE, parseNodePortRange } from "../../src/service/flags.ts";
import { type Oracle, startOracle } from "./oracle.ts";

const seed = Number(process.env.ORACLE_SEED ?? 20261127);
const numRuns = 4000;

interface GoAnswer {
  error?: string;
  base: number;
  size: number;
}

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

const seen = { accepted: 0, refused: 0 };

async function agree(text: string): Promise<void> {
  const go = await oracle.ask<GoAnswer>("port-range", text);
  let ours: { from: number; to: number } | undefined;
  try {
    ours = parseNodePortRange(text);
  } catch {
    ours = undefined;
  }
  const context = `${JSON.stringify(text)}: Go ${go.error ?? `${go.base}+${go.size}`}, ours ${JSON.stringify(ours)}`;
  if (go.error !== undefined) {
    seen.refused++;
    assert.equal(ours, undefined, context);
    return;
  }
  seen.accepted++;
  const expected = go.size === 0 ? parseNodePortRange(DEFAULT_NODE_PORT_RANGE) : { from: go.base, to: go.base + go.size - 1 };
  assert.deepEqual(ours, expected, context);
}

const digits = (min: number, max: number) =>
  fc.string({ unit: fc.constantFrom(..."0123456789"), minLength: min, maxLength: max });
const number = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 70_000 }).map(String) },
  { weight: 2, arbitrary: digits(1, 6) },
  { weight: 1, arbitrary: digits(10, 21) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom("+", "-", "00"), digits(1, 5)).map(([a, b]) => a + b) },
);
const space = fc.constantFrom("", "", "", " ", "\t", "\n", "\u00a0", "\u0085", "\u2003", "\ufeff", "\u200b");
const text = fc.oneof(
  { weight: 4, arbitrary: fc.tuple(space, number, fc.constantFrom("-", "+"), number, space).map((parts) => parts.join("")) },
  { weight: 2, arbitrary: fc.tuple(space, number, space).map((parts) => parts.join("")) },
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(..."0123456789-+ \t"), maxLength: 12 }) },
);

test("kube-apiserver's and ours agree on generated port ranges", async () => {
  for (const fixed of ["", " ", "30000-32767", "30000+2767", "80", "0", "0-0", "65535", "65536", "1-65536", "5-4",
    "1-2+3", "-5", "+5", "5-+6", "5++3", "5+-3", "5--3", " 8080 ", "\ufeff80", "\u008580"])
    await agree(fixed);
  await fc.assert(fc.asyncProperty(text, agree), { seed, numRuns });
  assert.ok(seen.accepted > 500 && seen.refused > 500, `accepted ${seen.accepted}, refused ${seen.refused}`);
});
