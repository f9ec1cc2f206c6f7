// docs/reference.md names every `local-ccm.io/*` annotation, label, class and API group the code and the chart use,
// and every Event reason the programs record, and none that the code does not have.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { ROOT } from "../../scripts/docs-tables.ts";

const reference = readFileSync(path.join(ROOT, "docs/reference.md"), "utf8");

/** The text of the files under a folder of the repository whose names end so (tests left out). */
function sources(folder: string, ...endings: string[]): string[] {
  return (readdirSync(path.join(ROOT, folder), { recursive: true }) as string[])
    .filter((file) => endings.some((ending) => file.endsWith(ending)) && !file.endsWith(".test.ts"))
    .map((file) => readFileSync(path.join(ROOT, folder, file), "utf8"));
}
const code = sources("src", ".ts");

/** The rows of the reference table under a heading: the first cell's backquoted names. */
function tableNames(heading: string): Set<string> {
  const section = reference.split(`\n## ${heading}\n`)[1]?.split("\n## ")[0] ?? "";
  const rows = section.split("\n").filter((line) => line.startsWith("| `"));
  return new Set(rows.flatMap((row) => [...(row.split(" | ")[0] as string).matchAll(/`([^`]+)`/g)].map((m) => m[1] as string)));
}

test("every local-ccm.io name in the code and the chart is in the annotations and labels table", () => {
  const names = new Set<string>();
  for (const text of [...code, ...sources("charts/local-ccm", ".yaml", ".tpl")])
    for (const [name] of text.matchAll(/\blocal-ccm\.io\/[a-z0-9][a-z0-9.-]*[a-z0-9]/g)) names.add(name);
  assert.ok(names.size >= 10, `names found: ${[...names].join(", ")}`);
  const documented = tableNames("Annotations and labels");
  assert.deepEqual([...names].filter((name) => !documented.has(name)).sort(), []);
  const stale = [...documented].filter((name) => name.startsWith("local-ccm.io/") && !names.has(name));
  assert.deepEqual(stale, [], "documented names the code no longer has");
});

// Reasons are passed as ("Normal" | "Warning", "Reason"), returned as { reason: "Reason" } or named in a table
// `…EVENT_REASONS = { key: "Reason", … }`; the second form also carries reasons that are metric labels, not Events:
// detection problems (local_ccm_detection_problems_total).
const NOT_EVENTS = new Set(["NoRoute", "NoAddress"]);

test("every Event reason the programs record is in the Event reasons table, and only those", () => {
  const reasons = new Set<string>();
  for (const text of code)
    for (const match of text.matchAll(/"(?:Normal|Warning)",\s*"([A-Z]\w+)"|\breason: "([A-Z]\w+)"|"(\w+LoadBalancer)"/g))
      reasons.add((match[1] ?? match[2] ?? match[3]) as string);
  for (const text of code)
    for (const [, table] of text.matchAll(/EVENT_REASONS = \{([^}]*)\}/g))
      for (const [, reason] of (table as string).matchAll(/:\s*"([A-Z]\w+)"/g)) reasons.add(reason as string);
  for (const name of NOT_EVENTS) assert.ok(reasons.delete(name), `${name} is no longer in the code: drop it from NOT_EVENTS`);
  assert.ok(reasons.size >= 30, `reasons found: ${[...reasons].join(", ")}`);
  const documented = tableNames("Event reasons");
  assert.deepEqual([...reasons].filter((reason) => !documented.has(reason)).sort(), [], "undocumented reasons");
  assert.deepEqual([...documented].filter((reason) => !reasons.has(reason)).sort(), [], "documented reasons the code lacks");
});
