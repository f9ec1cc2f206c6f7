import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { readDmi } from "./options.ts";

test("readDmi: the files there, trimmed; a file the host lacks, or no DMI at all, reads as empty", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "local-ccm-dmi-"));
  try {
    await writeFile(path.join(dir, "sys_vendor"), "Dell Inc.\n");
    await writeFile(path.join(dir, "product_name"), "PowerEdge R650\n");
    await writeFile(path.join(dir, "product_serial"), "SECRET\n"); // root-only on a host; never read
    const dmi = await readDmi(dir);
    assert.equal(dmi.sys_vendor, "Dell Inc.");
    assert.equal(dmi.product_name, "PowerEdge R650");
    assert.equal(dmi.board_vendor, "");
    assert.ok(!Object.values(dmi).includes("SECRET"));
    assert.ok(Object.values(await readDmi(path.join(dir, "absent"))).every((value) => value === ""));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
