// The peer suite in `npm test`: each mode's skip list checked against the pinned upstream suite, and a fast subset of
// upstream's load-balancer specs (FAST_FOCUS) run from the client host against the chart as shipped, class-less
// Services claimed by each mode in turn, each on a kube-proxy mode of its own (FAST_PROXY_MODE) so that both proxy
// modes are covered at the cost of two clusters. `npm run e2e:upstream` runs all of them (loadbalancer.ts).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import type { Cluster } from "../../localcluster/cluster.ts";
import type { ProxyMode } from "../../localcluster/kube-proxy.ts";
import { listSpecs } from "./e2e-suite.ts";
import {
  FAST_FOCUS,
  formatResults,
  LABEL_FILTER,
  NOT_APPLICABLE,
  PEER_MODES,
  type PeerMode,
  runPeerSuite,
  startPeerCluster,
} from "./loadbalancer.ts";

const FAST_PROXY_MODE: Record<PeerMode, ProxyMode> = { "node-address": "iptables", l2: "nftables", bgp: "iptables" };

describe("upstream load-balancer e2e tests (the peer suite)", () => {
  let reportDir: string;
  let failed = false;
  before(() => {
    reportDir = mkdtempSync(path.join(os.tmpdir(), "local-ccm-e2e-upstream-"));
  });
  after(() => {
    // Kept when something failed: e2e.log and the reports say what.
    if (!failed) rmSync(reportDir, { recursive: true, force: true });
  });

  test("every not-applicable entry of each mode names exactly one load-balancer spec of the pinned suite", async () => {
    const names = await listSpecs(LABEL_FILTER, reportDir);
    assert.ok(names.some((name) => name.includes("[Feature:LoadBalancer]")), `selected: ${names.join("; ")}`);
    for (const mode of PEER_MODES) {
      for (const { spec } of NOT_APPLICABLE[mode]) {
        const matching = names.filter((name) => name.includes(spec));
        assert.equal(matching.length, 1, `${mode}: "${spec}" matches ${matching.length}: ${matching.join("; ")}`);
      }
    }
  });

  const fastSubset = (mode: PeerMode) =>
    describe(`fast subset, ${mode}, kube-proxy in ${FAST_PROXY_MODE[mode]} mode`, () => {
      let cluster: Cluster;
      before(async () => {
        cluster = await startPeerCluster(mode, FAST_PROXY_MODE[mode]);
      });
      after(async () => {
        await cluster?.stop();
      });

      test("passes from the client host", async (t) => {
        const modeDir = path.join(reportDir, mode);
        const focus = FAST_FOCUS[mode];
        const results = await runPeerSuite(cluster, mode, { focus, reportDir: modeDir });
        t.diagnostic(formatResults(results));
        const passed = results.length === focus.split("|").length && results.every((r) => r.state === "passed");
        failed ||= !passed;
        if (!passed) t.diagnostic(`e2e.log and reports kept in ${modeDir}`);
        assert.equal(results.length, focus.split("|").length, "the focus selects one spec per alternative");
        assert.deepEqual(
          results.filter((r) => r.state !== "passed"),
          [],
        );
      });
    });
  for (const mode of PEER_MODES) fastSubset(mode);
});
