// Label selectors (--node-selector decides which nodes may be deleted) read by src/kube/labelselector.ts and by
// k8s.io/apimachinery/pkg/labels (Parse, Requirements, Matches), on selectors generated from the selector
// grammar and its edges, on token soups and on random text.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { type LabelSelector, matchesLabels, parseLabelSelector } from "../../src/kube/labelselector.ts";
import { type Oracle, startOracle } from "./oracle.ts";

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

// ---- generators: few keys and values, so selectors and label sets meet ----

const name63 = "n".repeat(62) + "1";
const prefix253 = Array.from({ length: 4 }, () => "p".repeat(62)).join(".") + ".a"; // 4*63 - 1 + 2 = 253
const validKey = fc.constantFrom(
  "a",
  "b",
  "in",
  "notin",
  "A.b_c-9",
  "x.y",
  "example.com/a",
  "node-role.kubernetes.io/worker",
  name63,
  `${prefix253}/a`,
);
const edgeKey = fc.constantFrom(
  "",
  "-a",
  "a-",
  "_a",
  "a.",
  `${name63}x`,
  `${prefix253}x/a`,
  "/a",
  "a/",
  "a/b/c",
  "Example.com/a",
  "exa_mple.com/a",
  "é",
  "constructor",
  "__proto__",
  "toString",
);
const commonKey = fc.constantFrom("a", "b", "example.com/a");
const key = fc.oneof(
  { weight: 10, arbitrary: commonKey },
  { weight: 6, arbitrary: validKey },
  { weight: 2, arbitrary: edgeKey },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
);

const validValue = fc.constantFrom(
  "",
  "x",
  "y",
  "in",
  "notin",
  "0",
  "1",
  "10",
  "007",
  "9223372036854775807",
  "9223372036854775808",
  "99999999999999999999",
  "X.y_z-1",
  "v".repeat(63),
);
const edgeValue = fc.constantFrom("-1", "+1", "-9223372036854775808", "v".repeat(64), "x.", "a/b", "1e3", "é");
const commonValue = fc.constantFrom("x", "y", "1", "10");
const value = fc.oneof(
  { weight: 10, arbitrary: commonValue },
  { weight: 6, arbitrary: validValue },
  { weight: 2, arbitrary: edgeValue },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
);

// What separates tokens: nothing, the lexer's whitespace, and characters other readers take as whitespace.
const space = fc.oneof(
  { weight: 16, arbitrary: fc.constantFrom("", " ") },
  { weight: 2, arbitrary: fc.constantFrom("  ", "\t", "\n", "\r") },
  { weight: 1, arbitrary: fc.constantFrom("\v", "\f", "\u00a0", "\u2003", "\ufeff", "\0") },
);
const operator = fc.constantFrom("=", "==", "!=", ">", "<", "in", "notin", "!", "=!", "<=", "===");

const valueList = fc
  .array(fc.tuple(space, value, space), { maxLength: 4 })
  .map((items) => items.map(([s1, v, s2]) => `${s1}${v}${s2}`).join(","));

// Mostly well-formed, with a share of broken brackets, operators and separators.
const often = <T>(usual: T, ...rare: T[]) =>
  fc.oneof({ weight: 3 * rare.length, arbitrary: fc.constant(usual) }, fc.constantFrom(...rare));
const setOperator = fc.constantFrom(" in ", " notin ", "\tin\t", "in(", " in", "in ");
const requirement = fc.oneof(
  { weight: 2, arbitrary: fc.tuple(key, space).map(([k, s]) => `${k}${s}`) },
  { weight: 2, arbitrary: fc.tuple(space, key).map(([s, k]) => `!${s}${k}`) },
  {
    weight: 4,
    arbitrary: fc
      .tuple(key, space, fc.constantFrom("=", "==", "!=", ">", "<"), space, value)
      .map((parts) => parts.join("")),
  },
  {
    weight: 4,
    arbitrary: fc
      .tuple(key, setOperator, often("(", "", "(("), valueList, often(")", "", "))", ",)"))
      .map((parts) => parts.join("")),
  },
  { weight: 1, arbitrary: fc.tuple(key, space, operator, space, value).map((parts) => parts.join("")) },
);

const grammar = fc
  .tuple(fc.array(fc.tuple(space, requirement, space), { maxLength: 4 }), often(",", ",,", ", ", " "))
  .map(([requirements, separator]) => requirements.map((parts) => parts.join("")).join(separator));

const soupToken = fc.oneof(key, value, operator, fc.constantFrom("(", ")", ",", " ", "!"));
const soup = fc.array(soupToken, { maxLength: 8 }).map((tokens) => tokens.join(""));
const randomText = fc.string({
  unit: fc.oneof(fc.constantFrom(..."ab1=!(),<> \t-_./"), fc.string({ minLength: 1, maxLength: 1 })),
  maxLength: 24,
});

const labelSet = fc.dictionary(
  fc.oneof({ weight: 6, arbitrary: commonKey }, validKey, edgeKey),
  fc.oneof({ weight: 6, arbitrary: commonValue }, validValue, edgeValue),
  { maxKeys: 4 },
);
const labelSets = fc.array(labelSet, { minLength: 1, maxLength: 6 });

test("selectors from the grammar: accepted alike, read as the same requirements, matched alike", async () => {
  Object.assign(seen, { accepted: 0, refused: 0, matched: 0, unmatched: 0 });
  await fc.assert(fc.asyncProperty(grammar, labelSets, agree), { seed, numRuns });
  console.log("grammar cases:", seen);
  assert.ok(seen.accepted > numRuns / 4 && seen.refused > numRuns / 4, JSON.stringify(seen));
  assert.ok(seen.matched > numRuns / 2 && seen.unmatched > numRuns / 3, JSON.stringify(seen));
});

test("token soups and random text: accepted and refused alike, matched alike", async () => {
  const text = fc.oneof(soup, randomText);
  Object.assign(seen, { accepted: 0, refused: 0, matched: 0, unmatched: 0 });
  await fc.assert(fc.asyncProperty(text, labelSets, agree), { seed, numRuns });
  console.log("soup and random cases:", seen);
  assert.ok(seen.accepted > numRuns / 20 && seen.refused > numRuns / 4, JSON.stringify(seen));
});
