// `npm run cluster` refuses what it does not know with one line that names it, then the usage, and exit 2, before
// it starts or removes anything (no cluster is needed to prove it: the folder it would use stays absent).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";

const CLI = path.resolve(import.meta.dirname, "../../localcluster/cluster-cli.ts");
const USAGE =
  "usage: npm run cluster -- up [--nodes N] [--control-plane-nodes M] [--proxy-mode iptables|nftables]" +
  " [--serving-certs] [--bgp] [--dual-stack] | kill-node NAME | client [-- COMMAND…] | down | build";

function cli(args: string[], dir: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, LOCAL_CCM_CLUSTER_DIR: dir } },
      (_err, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr }),
    );
  });
}

describe("npm run cluster: wrong invocations", () => {
  const parent = mkdtempSync(path.join(os.tmpdir(), "local-ccm-cluster-cli-"));
  after(() => rmSync(parent, { recursive: true, force: true }));

  const cases: [string[], string][] = [
    [["up", "--bogus"], "unknown flag --bogus"],
    // The invocation: it used to answer about --nodes.
    [["up", "--nodes", "3", "--server-tls-bootstrap"], "unknown flag --server-tls-bootstrap"],
    [["up", "-n", "3"], "unknown flag -n"],
    [["up", "--nodes"], "--nodes needs a value"],
    [["up", "--serving-certs=yes"], "--serving-certs takes no value"],
    [["up", "--bgp=frr"], "--bgp takes no value"],
    [["up", "--dual-stack=yes"], "--dual-stack takes no value"],
    [["up", "--nodes", "9"], "--nodes takes a number from 1 to 8"],
    [["up", "--nodes", "2", "--control-plane-nodes", "3"], "--control-plane-nodes takes a number from 0 to the nodes (2)"],
    [["up", "--proxy-mode", "ipvs"], "--proxy-mode takes iptables or nftables, not ipvs"],
    [["up", "3"], "unexpected argument 3"],
    [["frobnicate"], "unknown command frobnicate"],
  ];
  for (const [args, message] of cases) {
    test(`${args.join(" ")} → ${message}`, async () => {
      const dir = path.join(parent, args.join("_"));
      const { code, stdout, stderr } = await cli(args, dir);
      assert.equal(code, 2);
      assert.equal(stdout, "");
      assert.equal(stderr, `cluster: ${message}\n${USAGE}\n`);
      assert.ok(!existsSync(dir), "nothing started");
    });
  }

  test("no command → the usage alone", async () => {
    const { code, stderr } = await cli([], path.join(parent, "none"));
    assert.equal(code, 2);
    assert.equal(stderr, `${USAGE}\n`);
  });
});
