// The import rules of docs/architecture.md that a reader would otherwise have to trust: no file under src/ but the
// program itself (src/manager/) and the entry points (src/bin/) imports src/manager/ (controllers implement the
// contract in src/controller/, below both), and no circle of imports anywhere under src/ and localcluster/ (a type
// import counts: a circle of types is a circle a reader has to hold in mind too). Imports are read by TypeScript's
// own scanner, so `import type`, `export … from` and `import()` all count.
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

/** The circles of a graph (strongly connected components of two files or more, or one importing itself), each
 * sorted, by Tarjan's algorithm; edges to files outside the graph are left out. */
function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file) as number);
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!graph.has(target)) continue;
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file) as number, low.get(target) as number));
      } else if (onStack.has(target)) low.set(file, Math.min(low.get(file) as number, index.get(target) as number));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    for (let member = ""; member !== file; ) {
      member = stack.pop() as string;
      onStack.delete(member);
      component.push(member);
    }
    if (component.length > 1 || graph.get(file)?.includes(file)) found.push(component.sort());
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return found;
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

  test("a circle through a type import, an export and a dynamic import is found, and so is a file importing itself", () => {
    assert.deepEqual(circles(made).sort(), [["src/a/x.ts", "src/b/y.ts", "src/b/z.ts"], ["src/c/self.ts"]]);
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

  test("no circle of imports under src/ and localcluster/", () => {
    assert.deepEqual(circles(graph), []);
  });
});
