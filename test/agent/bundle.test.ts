// The agent's memory budget holds without BGP: the bundle the image runs (localcluster/bundle.ts) holds the ARP/NDP
// method but no module of the BGP speaker, which the program loads with import() only when BGP is on, from a bundle
// of its own beside the agent's (local-ccm-bgp.cjs).
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { bundleProgram } from "../../localcluster/bundle.ts";

test("the agent's bundle carries the announcing loop and ARP/NDP, and nothing of BGP", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "local-ccm-bundle-"));
  try {
    const code = await readFile(await bundleProgram("local-ccm", dir), "utf8");
    // esbuild opens each module's part of an unminified bundle with a comment naming its file
    const modules = [...code.matchAll(/^\/\/ (src\/\S+\.ts)$/gm)].map((match) => match[1]);
    assert.ok(modules.includes("src/agent/announcer/announcing.ts"), "the loop is bundled (the check can see it)");
    assert.ok(modules.includes("src/agent/announcer/arp-ndp/method.ts"), "the ARP/NDP method is bundled");
    assert.deepEqual(
      modules.filter((file) => /\/bgp\//.test(file ?? "")),
      [],
      "no BGP module on the agent's static import path",
    );
    assert.match(code, /require\("\.\/local-ccm-bgp\.cjs"\)/, "the speaker is required from its own bundle");
    const part = await readFile(path.join(dir, "local-ccm-bgp.cjs"), "utf8");
    assert.match(part, /^\/\/ src\/agent\/announcer\/bgp\/definition\.ts$/m, "which holds the BGP method");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
