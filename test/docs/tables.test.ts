// The docs' flag, metrics, controller and upstream-spec tables are generated from the code; this fails when they
// drift (fix with `npm run readme`), or when a table's marker is in no docs file or in two.
import assert from "node:assert/strict";
import { test } from "node:test";
import { readDocs, renderDocsTables } from "../../scripts/docs-tables.ts";

test("every generated table in the docs matches the programs' own", () => {
  const docs = readDocs();
  const rendered = renderDocsTables(docs);
  for (const [file, text] of docs) assert.equal(text, rendered.get(file), `${file}: run \`npm run readme\` to regenerate the tables`);
});
