// The README's flag and metrics tables are generated from the code; this fails when they drift
// (fix with `npm run readme`). Its first screen gives exactly the two commands.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { README, renderReadmeTables } from "../../scripts/readme-tables.ts";

const readme = readFileSync(README, "utf8");

test("README flag and metrics tables match the programs' own", () => {
  assert.equal(readme, renderReadmeTables(readme), "run `npm run readme` to regenerate the tables");
});

test("README's first screen gives exactly the demo and test commands", () => {
  const firstScreen = readme.split("\n").slice(0, 25).join("\n");
  const commands = [...firstScreen.matchAll(/^npm ci && npm \w+/gm)].map((m) => m[0]);
  assert.deepEqual(commands, ["npm ci && npm start", "npm ci && npm test"]);
  assert.match(readFileSync(new URL("../../.ci/run", import.meta.url), "utf8"), /^npm test$/m, ".ci/run runs the README's test command");
});
