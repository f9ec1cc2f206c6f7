import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Node } from "kubernetes-types/core/v1.js";
import type { BGPPeer } from "./peer.ts";
import { SESSION_STATES, SESSIONS_ANNOTATION, sessionReportText } from "./sessions.ts";
import {
  decidePeerStatus,
  NOT_ESTABLISHED_SHOWN,
  type NodeSessionFacts,
  nodeSessionFacts,
  sameStatus,
} from "./status.ts";

const SPEC = { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513 };
const peer = (nodeSelector?: NonNullable<BGPPeer["spec"]>["nodeSelector"]): BGPPeer => ({
  metadata: { name: "tor-a" },
  spec: { ...SPEC, ...(nodeSelector ? { nodeSelector } : {}) },
});

/** A Node as the informer keeps it: labels, the report annotation, Ready. */
function node(name: string, options: { ready?: string; report?: string; labels?: Record<string, string> } = {}) {
  const { ready = "True", report, labels = {} } = options;
  const annotations = report === undefined ? {} : { [SESSIONS_ANNOTATION]: report };
  const conditions = [{ type: "Ready", status: ready }];
  return nodeSessionFacts({ metadata: { name, labels, annotations }, status: { conditions } } as Node);
}

describe("decidePeerStatus", () => {
  test("each selected node counted by its report of this peer, or by why it has none", () => {
    const nodes = [
      node("n1", { report: sessionReportText({ "tor-a": "Established", "tor-b": "Active" }) }),
      node("n2", { report: sessionReportText({ "tor-a": "Active" }) }),
      node("n3", { report: sessionReportText({ "tor-b": "Established" }) }),
      node("n4"),
      node("n5", { ready: "Unknown", report: sessionReportText({ "tor-a": "Established" }) }),
      node("n6", { report: '{"tor-a":"Up"}' }),
      node("n7", { report: "{" }),
      node("n0", { report: sessionReportText({ "tor-a": "OpenConfirm" }) }),
    ];
    const { status, sessions } = decidePeerStatus(peer(), nodes);
    assert.deepEqual(status, {
      nodes: 8,
      established: 1,
      notEstablished: [
        "n0: OpenConfirm",
        "n2: Active",
        "n3: no report",
        "n4: no report",
        "n5: not Ready",
        "n6: report refused (report-unknown-state)",
        "n7: report refused (report-malformed)",
      ],
    });
    assert.deepEqual(
      sessions.map(({ node, rule }) => `${node} ${rule}`),
      ["n0 OpenConfirm", "n1 Established", "n2 Active", "n3 no-report", "n4 no-report", "n5 not-ready"]
        .concat(["n6 report-refused", "n7 report-refused"]),
    );
  });

  test("the nodeSelector picks the nodes counted; unset, every node; one the CRD would refuse, none", () => {
    const nodes = [
      node("r1-a", { labels: { rack: "r1" }, report: sessionReportText({ "tor-a": "Established" }) }),
      node("r1-b", { labels: { rack: "r1" } }),
      node("r2-a", { labels: { rack: "r2" }, report: sessionReportText({ "tor-a": "Established" }) }),
    ];
    const table: [BGPPeer, number, number][] = [
      [peer(), 3, 2],
      [peer({ matchLabels: { rack: "r1" } }), 2, 1],
      [peer({ matchExpressions: [{ key: "rack", operator: "NotIn", values: ["r1"] }] }), 1, 1],
      [peer({ matchExpressions: [{ key: "rack", operator: "DoesNotExist" }] }), 0, 0],
      [peer({ matchExpressions: [{ key: "rack", operator: "Near" }] }), 0, 0],
    ];
    for (const [each, nodesCounted, established] of table) {
      const { status } = decidePeerStatus(each, nodes);
      assert.deepEqual([status.nodes, status.established], [nodesCounted, established], JSON.stringify(each.spec));
    }
  });

  const facts = fc.record({
    name: fc.stringMatching(/^n[0-9]{1,3}$/),
    labels: fc.record({ rack: fc.constantFrom("r1", "r2") }),
    ready: fc.boolean(),
    report: fc.option(
      fc.oneof(
        fc.record({ rule: fc.constant("report-malformed" as const), reason: fc.constant("not JSON") }),
        fc
          .dictionary(fc.constantFrom("tor-a", "tor-b"), fc.constantFrom(...SESSION_STATES))
          .map((sessions) => ({ sessions: new Map(Object.entries(sessions)) })),
      ),
      { nil: undefined },
    ),
  }) as fc.Arbitrary<NodeSessionFacts>;
  const nodeSet = fc.uniqueArray(facts, { selector: ({ name }) => name, maxLength: 40 });

  test("property: the counts are complete, the list bounded, sorted, and names only nodes not counted established", () => {
    fc.assert(
      fc.property(nodeSet, fc.boolean(), (nodes, selects) => {
        const each = selects ? peer({ matchLabels: { rack: "r1" } }) : peer();
        const { status, sessions } = decidePeerStatus(each, nodes);
        const selected = nodes.filter((node) => !selects || node.labels.rack === "r1");
        const established = selected.filter(
          (node) => node.ready && node.report && "sessions" in node.report && node.report.sessions.get("tor-a") === "Established",
        );
        assert.equal(status.nodes, selected.length);
        assert.equal(status.established, established.length);
        assert.equal(sessions.length, selected.length);
        assert.equal(status.notEstablished.length, Math.min(NOT_ESTABLISHED_SHOWN, selected.length - established.length));
        const named = status.notEstablished.map((line) => line.slice(0, line.indexOf(": ")));
        assert.deepEqual(named, [...named].sort());
        for (const name of named) assert.ok(!established.some((node) => node.name === name), name);
        assert.ok(sameStatus(status, decidePeerStatus(each, [...nodes].reverse()).status), "whatever the nodes' order");
      }),
    );
  });
});

describe("sameStatus", () => {
  test("a status not written yet, or differing in a count or a line, is not the same", () => {
    const status = { nodes: 2, established: 1, notEstablished: ["n2: Active"] };
    assert.ok(sameStatus({ ...status, notEstablished: ["n2: Active"] }, status));
    assert.ok(!sameStatus(undefined, status));
    assert.ok(!sameStatus({ ...status, established: 2 }, status));
    assert.ok(!sameStatus({ ...status, notEstablished: ["n2: Idle"] }, status));
    assert.ok(sameStatus({ nodes: 0, established: 0 }, { nodes: 0, established: 0, notEstablished: [] }));
  });
});
