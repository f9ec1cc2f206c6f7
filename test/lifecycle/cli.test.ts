// Bad input to the node-lifecycle-controller: one line on stderr, exit code 2, before any API call
// (the kubeconfig points at a port nobody listens on, so a request would fail differently).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { PROGRAM_TS } from "./world.ts";

const dir = mkdtempSync(path.join(os.tmpdir(), "nlc-cli-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const kubeconfig = path.join(dir, "kubeconfig");
writeFileSync(
  kubeconfig,
  JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "c", cluster: { server: "https://127.0.0.1:1" } }],
    users: [{ name: "u", user: { token: "t" } }],
    contexts: [{ name: "c", context: { cluster: "c", user: "u" } }],
    "current-context": "c",
  }),
);

test("bad selector, duration, count, label syntax or kubeconfig: one line, exit 2", () => {
  const cases: [string[], RegExp][] = [
    [["--node-selector=pool in spot"], /--node-selector/],
    [["--not-ready-timeout=5 minutes"], /--not-ready-timeout/],
    [["--ping-count=0"], /--ping-count/],
    [["--protected-labels=a=b=c"], /--protected-labels/],
    [["--protected-annotations=bad key"], /--protected-annotations/],
    [["--unhealthy-threshold=1.5"], /--unhealthy-threshold/],
    [["--leader-elect-renew-deadline=20s"], /--leader-elect-lease-duration must be greater/],
    [["--kubeconfig=/nonexistent/kubeconfig"], /cannot read kubeconfig \/nonexistent\/kubeconfig/],
  ];
  for (const [args, message] of cases) {
    const argv = [`--kubeconfig=${kubeconfig}`, ...args]; // a repeated flag keeps its last value
    const result = spawnSync(process.execPath, [PROGRAM_TS, ...argv], { encoding: "utf8", timeout: 30_000 });
    assert.equal(result.status, 2, `${args.join(" ")}: ${result.stderr}`);
    const lines = result.stderr.trimEnd().split("\n");
    assert.equal(lines.length, 1, `${args.join(" ")}: one line, got ${result.stderr}`);
    assert.match(lines[0] ?? "", /^node-lifecycle-controller: /);
    assert.match(lines[0] ?? "", message);
    assert.equal(result.stdout, "");
  }
});
