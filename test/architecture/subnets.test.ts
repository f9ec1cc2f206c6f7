// Test files that link namespaces to the root namespace each take a subnet of 198.19.<subnet>.0/24 of their own
// (test/netns/netns.ts worlds, the BGP routers' links): two files on one subnet collide when CI runs them at once.
// Every `subnet: N`, `SUBNET = N` and `…Suite(start, N)` under test/ and bench/ names a different N.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { globSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

const ROOT = path.join(import.meta.dirname, "../..");
const CLAIM = /\bsubnet: (\d+)\b|\bSUBNET = (\d+)\b|Suite\(\w+, (\d+)\)/g;

/** Each subnet claimed, with the files that claim it. */
function claims(files: Record<string, string>): Map<number, string[]> {
  const found = new Map<number, string[]>();
  for (const [file, text] of Object.entries(files))
    for (const match of text.matchAll(CLAIM)) {
      const subnet = Number(match[1] ?? match[2] ?? match[3]);
      const owners = found.get(subnet) ?? [];
      if (!owners.includes(file)) found.set(subnet, [...owners, file]);
    }
  return found;
}

const shared = (found: Map<number, string[]>) =>
  [...found].filter(([, files]) => files.length > 1).map(([subnet, files]) => `${subnet}: ${files.join(", ")}`);

test("the check sees two files on one subnet", () => {
  const found = claims({ "a.test.ts": "startWorld({ subnet: 243 })", "b.test.ts": "peeringSuite(startGobgp, 243)" });
  assert.deepEqual(shared(found), ["243: a.test.ts, b.test.ts"]);
});

test("no two test or bench files claim one subnet", () => {
  const files = Object.fromEntries(
    globSync(["test/**/*.ts", "bench/**/*.ts"], { cwd: ROOT })
      .filter((file) => file !== "test/architecture/subnets.test.ts")
      .map((file) => [file, readFileSync(path.join(ROOT, file), "utf8")]),
  );
  const found = claims(files);
  assert.ok(found.size >= 10, `only ${found.size} subnets found: the pattern no longer matches the files`);
  assert.deepEqual(shared(found), []);
});
