// The README is the first page: its first screen gives exactly the two commands, and it stays short enough to
// read (the rest lives in docs/, by the reader's task).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { ROOT } from "../../scripts/docs-tables.ts";

const readme = readFileSync(path.join(ROOT, "README.md"), "utf8");

test("README's first screen gives exactly the demo and test commands", () => {
  const firstScreen = readme.split("\n").slice(0, 25).join("\n");
  const commands = [...firstScreen.matchAll(/^npm ci && npm \w+/gm)].map((m) => m[0]);
  assert.deepEqual(commands, ["npm ci && npm start", "npm ci && npm test"]);
  assert.match(readFileSync(path.join(ROOT, ".ci/run"), "utf8"), /^npm test$/m, ".ci/run runs the README's test command");
});

test("README stays within 48 KB", () => {
  const size = Buffer.byteLength(readme);
  assert.ok(size <= 48 * 1024, `README.md is ${size} bytes: move reference material into docs/`);
});
