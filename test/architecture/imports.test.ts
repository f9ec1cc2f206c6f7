// The import rules of docs/architecture.md that a reader would otherwise have to trust: no file under src/ but the
// program itself (src/manager/) and the entry points (src/bin/) imports src/manager/ (controllers implement the
// contract in src/controller/, below both). Imports are read by TypeScript's own scanner, so `import type`,
// `export … from` and `import()` all count.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import ts from "typescript";

const ROOT = path.resolve(import.meta.dirname, "../..");
const SCANNED = ["src", "localcluster"];

/** Each file's relative imports, resolved to paths from the root, whether or not they were given. */
function importGraph(files: ReadonlyMap<string, string>): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const [file, text] of files) {
    const targets = ts
      .preProcessFile(text, true, true)
      .importedFiles.map(({ fileName }) => fileName)
      .filter((specifier) => specifier.startsWith("."))
      .map((specifier) => path.posix.join(path.posix.dirname(file), specifier));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Imports of src/manager/ from files under src/ outside src/manager/ and src/bin/, as "file -> target". */
function managerImports(graph: ReadonlyMap<string, readonly string[]>): string[] {
  const allowed = (file: string) => file.startsWith("src/manager/") || file.startsWith("src/bin/");
  return [...graph].flatMap(([file, targets]) =>
    file.startsWith("src/") && !allowed(file)
      ? targets.filter((target) => target.startsWith("src/manager/")).map((target) => `${file} -> ${target}`)
      : [],
  );
}

describe("the rules, on made-up files", () => {
  const made = importGraph(
    new Map([
      ["src/a/x.ts", 'import type { Y } from "../b/y.ts";\nexport const x = 1;'],
      ["src/b/y.ts", 'export { z } from "./z.ts";\nexport type Y = number;'],
      ["src/b/z.ts", 'export const z = () => import("../a/x.ts");\nimport { readFileSync } from "node:fs";'],
      ["src/c/self.ts", 'import "./self.ts";'],
      ["src/csr/definition.ts", 'import { defineController } from "../manager/controller.ts";'],
      ["src/bin/program.ts", 'import { main } from "../manager/program.ts";'],
      ["src/manager/program.ts", 'import { defineController } from "../controller/definition.ts";'],
    ]),
  );

  test("every kind of import is an edge, and packages are none", () => {
    assert.deepEqual(made.get("src/a/x.ts"), ["src/b/y.ts"]);
    assert.deepEqual(made.get("src/b/y.ts"), ["src/b/z.ts"]);
    assert.deepEqual(made.get("src/b/z.ts"), ["src/a/x.ts"]);
  });

  test("a controller importing src/manager/ is named; the entry point and the program are not", () => {
    assert.deepEqual(managerImports(made), ["src/csr/definition.ts -> src/manager/controller.ts"]);
  });
});

describe("the rules, on this repository", () => {
  const files = new Map<string, string>();
  for (const folder of SCANNED)
    for (const file of readdirSync(path.join(ROOT, folder), { recursive: true }) as string[])
      if (file.endsWith(".ts")) files.set(`${folder}/${file}`, readFileSync(path.join(ROOT, folder, file), "utf8"));
  const graph = importGraph(files);

  test("the files are read", () => {
    assert.ok(graph.size > 200, `${graph.size} files`);
    assert.ok(graph.get("src/manager/program.ts")?.includes("src/controller/definition.ts"));
  });

  test("nothing under src/ but src/manager/ and src/bin/ imports src/manager/", () => {
    assert.deepEqual(managerImports(graph), []);
  });
});
