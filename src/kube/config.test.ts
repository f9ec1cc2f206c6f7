import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { serviceAccountNamespace } from "./config.ts";

test("the service account namespace file: trimmed; missing or empty is undefined", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "sa-"));
  try {
    assert.equal(serviceAccountNamespace(dir), undefined);
    writeFileSync(path.join(dir, "namespace"), "");
    assert.equal(serviceAccountNamespace(dir), undefined);
    writeFileSync(path.join(dir, "namespace"), "ops\n");
    assert.equal(serviceAccountNamespace(dir), "ops");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
