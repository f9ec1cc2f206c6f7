import assert from "node:assert/strict";
import { test } from "node:test";
import { parseLabelSelector } from "../../../kube/labelselector.ts";
import { decideSelection, type SelectionRule } from "./selection.ts";

test("selection: only nodes whose labels match --lb-l2-node-selector announce; no selector, every node", () => {
  const edge = parseLabelSelector("node-role.kubernetes.io/edge");
  const zones = parseLabelSelector("topology.kubernetes.io/zone in (a,b), !node.kubernetes.io/exclude-l2");
  const cases: [string, string | undefined, Record<string, string> | undefined, boolean, SelectionRule][] = [
    ["no selector, the Node not known", undefined, undefined, true, "every-node"],
    ["an empty selector", "", { any: "label" }, true, "every-node"],
    ["a selector, the Node not known", "node-role.kubernetes.io/edge", undefined, false, "node-unknown"],
    ["the label present", "node-role.kubernetes.io/edge", { "node-role.kubernetes.io/edge": "" }, true, "selected"],
    ["the label absent", "node-role.kubernetes.io/edge", { other: "x" }, false, "not-selected"],
    ["a zone listed", zones.text, { "topology.kubernetes.io/zone": "b" }, true, "selected"],
    ["a zone not listed", zones.text, { "topology.kubernetes.io/zone": "c" }, false, "not-selected"],
    [
      "a zone listed, excluded",
      zones.text,
      { "topology.kubernetes.io/zone": "a", "node.kubernetes.io/exclude-l2": "" },
      false,
      "not-selected",
    ],
  ];
  for (const [name, text, labels, announce, rule] of cases) {
    const selection = decideSelection(text === undefined ? undefined : parseLabelSelector(text), labels);
    assert.deepEqual([selection.announce, selection.rule], [announce, rule], name);
  }
  assert.equal(
    decideSelection(edge, {}).reason,
    `the Node's labels do not match --lb-l2-node-selector "node-role.kubernetes.io/edge"`,
  );
  assert.equal(
    decideSelection(edge, undefined).reason,
    `no Node (not registered yet, or deleted) to match --lb-l2-node-selector "node-role.kubernetes.io/edge"`,
  );
});
