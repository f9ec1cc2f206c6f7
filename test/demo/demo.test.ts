// `npm start` (demo/main.ts) does what the README promises: initialises the kubelet-like nodes,
// deletes the unreachable autoscaler-tainted one, shows the events, and leaves nothing running.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

test("the demo initialises the nodes, deletes the dead one, and stops everything", () => {
  // Its own TMPDIR: whatever the demo leaves (processes, folders) is told apart from other tests'.
  const tmp = mkdtempSync(path.join(os.tmpdir(), "local-ccm-demo-test-"));
  const demo = spawnSync(process.execPath, [path.join(import.meta.dirname, "../../demo/main.ts")], {
    encoding: "utf8",
    timeout: 300_000,
    env: { ...process.env, TMPDIR: tmp },
  });
  assert.equal(demo.status, 0, demo.stderr);
  const out = demo.stdout;
  const [before, afterAgents, afterController] = out.split(/== (?:local-ccm starts|node-lifecycle-controller:)/);
  assert.match(before ?? "", /worker-1\s.*node\.cloudprovider\.kubernetes\.io\/uninitialized/);
  assert.match(afterAgents ?? "", /worker-1\s+Ready\s+\S+\s+\S+\s+198\.18\.100\.11\s+198\.18\.10\.10/);
  assert.match(afterAgents ?? "", /worker-2\s+Ready\s+\S+\s+\S+\s+198\.18\.100\.12\s+198\.18\.11\.10/);
  assert.doesNotMatch((afterAgents ?? "").split("TAINTS")[1] ?? "", /uninitialized/);
  assert.doesNotMatch((afterController ?? "").split("== events")[0] ?? "", /worker-gone/, "the dead node is gone");
  assert.match(out, /worker-gone\s+Normal\s+DeletingNode\s+Deleting node: NotReady for .*unreachable/);
  assert.match(out, /worker-1\s+Normal\s+TaintRemoved/);
  assert.equal(execFileSync("ip", ["netns", "list"], { encoding: "utf8" }).match(new RegExp(`lccm${demo.pid}-`)), null);
  const leftovers = spawnSync("pgrep", ["-af", tmp], { encoding: "utf8" }).stdout.trim();
  assert.equal(leftovers, "", "no control plane or agent left running");
  assert.deepEqual(readdirSync(tmp), [], "no temp folder left");
  rmSync(tmp, { recursive: true, force: true });
});
