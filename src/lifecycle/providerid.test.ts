import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { sharedProviderIDs } from "./providerid.ts";

const node = (name: string, providerID?: string): Node => ({
  metadata: { name, uid: `uid-${name}` },
  spec: providerID === undefined ? {} : { providerID },
});
const CLONED = "local://4c4c4544-0042-3510-8052-b4c04f384e32";

const cases: [string, Node[], { providerID: string; nodes: string[] }[]][] = [
  ["no Nodes", [], []],
  ["each its own", [node("a", "local://1"), node("b", "local://2")], []],
  ["none set yet: nothing shared", [node("a"), node("b"), node("c", "")], []],
  [
    "three cloned machines, and two others apart",
    [node("w3", CLONED), node("w1", CLONED), node("x", "local://x"), node("w2", CLONED), node("y")],
    [{ providerID: CLONED, nodes: ["w1", "w2", "w3"] }],
  ],
  [
    "two pairs, in providerID order; text compared exactly (case and scheme matter)",
    [
      node("d", "aws:///eu-1a/i-2"),
      node("a", "aws:///eu-1a/i-1"),
      node("c", "aws:///eu-1a/i-2"),
      node("b", "aws:///eu-1a/i-1"),
      node("e", "AWS:///eu-1a/i-1"),
      node("f", "aws://eu-1a/i-1"),
    ],
    [
      { providerID: "aws:///eu-1a/i-1", nodes: ["a", "b"] },
      { providerID: "aws:///eu-1a/i-2", nodes: ["c", "d"] },
    ],
  ],
];

for (const [name, nodes, expected] of cases) {
  test(`shared providerIDs: ${name}`, () => {
    const shared = sharedProviderIDs(nodes);
    assert.deepEqual(
      shared.map((s) => ({ providerID: s.providerID, nodes: s.nodes.map((n) => n.metadata?.name) })),
      expected,
    );
  });
}

test("shared providerIDs: the reason names the value, the count and the Nodes", () => {
  const [shared] = sharedProviderIDs([node("b", CLONED), node("a", CLONED)]);
  assert.equal(
    shared?.reason,
    `spec.providerID ${CLONED} is shared by 2 Nodes (a, b); tools that find a node by its providerID ` +
      "(cluster-autoscaler, cloud controllers) may act on the wrong one: give each machine its own",
  );
});
