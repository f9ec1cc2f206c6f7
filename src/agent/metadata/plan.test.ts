import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import type { Node } from "kubernetes-types/core/v1.js";
import { desiredMetadata, isEmptyPlan, METADATA_LABELS, metadataPatch, type PatchOperation, type PlanOptions } from "./plan.ts";
import type { InstanceMetadata } from "./providers.ts";

const ZONE = "topology.kubernetes.io/zone";
const REGION = "topology.kubernetes.io/region";
const TYPE = "node.kubernetes.io/instance-type";
const found: InstanceMetadata = { providerID: "aws:///eu-1a/i-1", region: "eu-1", zone: "eu-1a", instanceType: "m5.large" };
const initialising: PlanOptions = { initialising: true, updateLabels: false };
const initialised: PlanOptions = { initialising: false, updateLabels: false };

const node = (providerID: string | undefined, labels: Record<string, string> = {}): Node => ({
  metadata: { name: "n", labels: { "kubernetes.io/hostname": "n", ...labels } },
  spec: providerID === undefined ? {} : { providerID },
});

/** RFC 6902 on plain JSON, enough for the operations metadataPatch emits; a failed test throws. */
function applyPatch<T>(document: T, ops: PatchOperation[]): T {
  const result = structuredClone(document) as Record<string, unknown>;
  for (const op of ops) {
    const keys = op.path.split("/").slice(1).map((k) => k.replaceAll("~1", "/").replaceAll("~0", "~"));
    const last = keys.pop() as string;
    const parent = keys.reduce<Record<string, unknown>>((at, key) => at[key] as Record<string, unknown>, result);
    if (op.op === "test") assert.deepEqual(parent[last], op.value, `test ${op.path}`);
    else if (op.op === "replace") {
      assert.ok(last in parent, `replace ${op.path}: absent`);
      parent[last] = op.value;
    } else if (op.op === "add") parent[last] = op.value;
    else delete parent[last];
  }
  return result as T;
}

describe("desiredMetadata", () => {
  test("initialising a kubelet-registered Node: providerID and all three labels", () => {
    const plan = desiredMetadata(node(undefined), found, initialising);
    assert.deepEqual(plan, {
      providerID: "aws:///eu-1a/i-1",
      labels: { [REGION]: "eu-1", [ZONE]: "eu-1a", [TYPE]: "m5.large" },
      taints: [],
      notes: [],
    });
  });

  test("a providerID someone else set is kept and reported", () => {
    const plan = desiredMetadata(node("kind://docker/x"), { providerID: "aws:///eu-1a/i-1" }, initialising);
    assert.equal(plan.providerID, undefined);
    assert.deepEqual(plan.notes, [
      {
        reason: "ProviderIDMismatch",
        message: "spec.providerID is kind://docker/x, the node's metadata says aws:///eu-1a/i-1: kept (a providerID cannot change)",
      },
    ]);
  });

  test("a label kubelet set (--node-labels) is kept and the disagreement reported; the others are added", () => {
    const plan = desiredMetadata(node("", { [ZONE]: "rack-1" }), found, initialising);
    assert.deepEqual(plan.labels, { [REGION]: "eu-1", [TYPE]: "m5.large" });
    assert.deepEqual(plan.notes, [
      { reason: "MetadataLabelKept", message: `${ZONE} is rack-1 (set by kubelet or a person), the node's metadata says eu-1a: kept` },
    ]);
  });

  test("after initialisation nothing is added or changed unless the agent owns the labels", () => {
    const current = node(found.providerID, { [ZONE]: "old" });
    const plan = desiredMetadata(current, found, initialised);
    assert.deepEqual(plan.labels, {});
    assert.deepEqual(
      plan.notes.map((n) => n.reason),
      ["MetadataLabelNotAdded", "MetadataLabelKept", "MetadataLabelNotAdded"],
    );
    const owned = desiredMetadata(current, found, { initialising: false, updateLabels: true });
    assert.deepEqual(owned.labels, { [REGION]: "eu-1", [ZONE]: "eu-1a", [TYPE]: "m5.large" });
  });

  test("the patch tests what it replaces and adds what was absent", () => {
    const current = node("", { [ZONE]: "old" });
    const plan = desiredMetadata(current, found, { initialising: true, updateLabels: true });
    assert.deepEqual(metadataPatch(current, plan), [
      { op: "test", path: "/spec/providerID", value: "" },
      { op: "replace", path: "/spec/providerID", value: "aws:///eu-1a/i-1" },
      { op: "add", path: "/metadata/labels/topology.kubernetes.io~1region", value: "eu-1" },
      { op: "test", path: "/metadata/labels/topology.kubernetes.io~1zone", value: "old" },
      { op: "replace", path: "/metadata/labels/topology.kubernetes.io~1zone", value: "eu-1a" },
      { op: "add", path: "/metadata/labels/node.kubernetes.io~1instance-type", value: "m5.large" },
    ]);
  });

  const labelValue = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?$/);
  const anyNode = fc
    .record({
      providerID: fc.option(fc.constantFrom("", "aws:///a/i-1", "local://x"), { nil: undefined }),
      labels: fc.option(
        fc.dictionary(fc.constantFrom(ZONE, REGION, TYPE, "kubernetes.io/hostname", "example.com/x"), labelValue),
        { nil: undefined },
      ),
    })
    .map(({ providerID, labels }): Node => ({
      metadata: labels === undefined ? { name: "n" } : { name: "n", labels },
      spec: providerID === undefined ? {} : { providerID },
    }));
  const anyMetadata = fc.record(
    { providerID: fc.constantFrom("aws:///a/i-1", "hcloud://7"), region: labelValue, zone: labelValue, instanceType: labelValue },
    { requiredKeys: [] },
  );
  const anyOptions = fc.record({ initialising: fc.boolean(), updateLabels: fc.boolean() });

  test("property: never changes an existing providerID, never writes a label outside the three", () => {
    const allowed = new Set(Object.values(METADATA_LABELS));
    fc.assert(
      fc.property(anyNode, anyMetadata, anyOptions, (current, metadata, options) => {
        const after = applyPatch(current, metadataPatch(current, desiredMetadata(current, metadata, options)));
        if (current.spec?.providerID) assert.equal(after.spec?.providerID, current.spec.providerID);
        const before = current.metadata?.labels ?? {};
        for (const [key, value] of Object.entries(after.metadata?.labels ?? {}))
          if (before[key] !== value) assert.ok(allowed.has(key), `wrote ${key}`);
        for (const key of Object.keys(before)) assert.ok(key in (after.metadata?.labels ?? {}), `removed ${key}`);
        if (!options.initialising && !options.updateLabels)
          assert.deepEqual(Object.entries(after.metadata?.labels ?? {}), Object.entries(before));
      }),
    );
  });

  test("property: applying a plan then planning again writes nothing", () => {
    fc.assert(
      fc.property(anyNode, anyMetadata, anyOptions, (current, metadata, options) => {
        const after = applyPatch(current, metadataPatch(current, desiredMetadata(current, metadata, options)));
        assert.ok(isEmptyPlan(desiredMetadata(after, metadata, options)));
      }),
    );
  });
});
