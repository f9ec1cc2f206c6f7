// Label selectors (--node-selector decides which nodes may be deleted) read by src/kube/labelselector.ts and by
// k8s.io/apimachinery/pkg/labels (Parse, Requirements, Matches), on selectors generated from the selector
// grammar and its edges, on token soups and on random text.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { type LabelSelector, matchesLabels, parseLabelSelector } from "../../src/kube/labelselector.ts";
import { type Oracle, startOracle } from "./oracle.ts";
import { labelSets, selectorGrammar, selectorSoup } from "./selectors.ts";

// Fixed so CI runs the same cases every time; fast-check prints the seed and path of a failure.
const seed = Number(process.env.ORACLE_SEED ?? 20261124);
const numRuns = 3000;

interface GoAnswer {
  error?: string;
  requirements?: { key: string; operator: string; values: string[] }[];
  matches?: boolean[];
}

let oracle: Oracle;
before(async () => {
  oracle = await startOracle();
});
after(() => oracle.close());

const GO_OPERATOR: Record<string, string> = { "==": "=", gt: ">", lt: "<" };

/** Go's requirements in our shape: "==" is "=", gt/lt are > and <; values a sorted set, as Go keeps them. */
function normalise(requirements: { key: string; operator: string; values: string[] }[]): string[] {
  return requirements
    .map(({ key, operator, values }) =>
      JSON.stringify([key, GO_OPERATOR[operator] ?? operator, [...new Set(values)].sort()]),
    )
    .sort();
}

function ours(text: string): LabelSelector | Error {
  try {
    return parseLabelSelector(text);
  } catch (err) {
    return err as Error;
  }
}

// What the cases covered, so a generator that drifts into refusing everything (or matching nothing) fails.
const seen = { accepted: 0, refused: 0, matched: 0, unmatched: 0 };

async function agree(text: string, labelSets: Record<string, string>[]): Promise<void> {
  const go = await oracle.ask<GoAnswer>("labels", { selector: text, labels: labelSets });
  seen[go.error === undefined ? "accepted" : "refused"]++;
  for (const match of go.matches ?? []) seen[match ? "matched" : "unmatched"]++;
  const parsed = ours(text);
  const context = `selector ${JSON.stringify(text)}: Go ${go.error ?? "accepts"}`;
  if (text.includes("\0")) {
    // apimachinery's lexer reads a NUL byte as the end of input and drops the rest; ours refuses instead.
    assert.ok(parsed instanceof Error && /NUL/.test(parsed.message), context);
    return;
  }
  if (go.error !== undefined) {
    assert.ok(parsed instanceof Error, `${context}, ours accepts`);
    return;
  }
  assert.ok(!(parsed instanceof Error), `${context}, ours refuses: ${(parsed as Error).message}`);
  const mine = parsed.requirements.map(({ key, operator, values }) => ({ key, operator, values }));
  assert.deepEqual(normalise(mine), normalise(go.requirements ?? []), context);
  const matches = labelSets.map((labels) => matchesLabels(parsed, labels));
  assert.deepEqual(matches, go.matches ?? [], `${context}; labels ${JSON.stringify(labelSets)}`);
}

test("selectors from the grammar: accepted alike, read as the same requirements, matched alike", async () => {
  Object.assign(seen, { accepted: 0, refused: 0, matched: 0, unmatched: 0 });
  await fc.assert(fc.asyncProperty(selectorGrammar, labelSets, agree), { seed, numRuns });
  console.log("grammar cases:", seen);
  assert.ok(seen.accepted > numRuns / 4 && seen.refused > numRuns / 4, JSON.stringify(seen));
  assert.ok(seen.matched > numRuns / 2 && seen.unmatched > numRuns / 3, JSON.stringify(seen));
});

test("token soups and random text: accepted and refused alike, matched alike", async () => {
  const text = selectorSoup;
  Object.assign(seen, { accepted: 0, refused: 0, matched: 0, unmatched: 0 });
  await fc.assert(fc.asyncProperty(text, labelSets, agree), { seed, numRuns });
  console.log("soup and random cases:", seen);
  assert.ok(seen.accepted > numRuns / 20 && seen.refused > numRuns / 4, JSON.stringify(seen));
});
