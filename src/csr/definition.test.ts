import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { IDENTITY_FIELDS, projection } from "../kube/fields.ts";
import { UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import { kubeletServingCsr } from "./definition.ts";
import { nodeFacts } from "./nodes.ts";

test("the approver's Node watch keeps what its index reads: names, every address, the uninitialized taint", () => {
  const { keep } = kubeletServingCsr.watches(undefined as never).nodes;
  assert.ok(typeof keep !== "function");
  const trim = projection<Node>([...IDENTITY_FIELDS, ...keep]);
  const node: Node = {
    metadata: { name: "n1", uid: "u1", resourceVersion: "7", labels: { big: "x" }, annotations: { big: "y" } },
    spec: { providerID: "p", taints: [{ key: UNINITIALIZED_TAINT, effect: "NoSchedule", value: "true" }] },
    status: {
      addresses: [
        { type: "InternalIP", address: "198.18.0.1" },
        { type: "ExternalIP", address: "fd00::1" },
        { type: "Hostname", address: "n1" },
        { type: "InternalDNS", address: "n1.lan" },
      ],
      conditions: [{ type: "Ready", status: "True" }],
    },
  };
  const trimmed = trim(node);
  assert.deepEqual(nodeFacts(trimmed), nodeFacts(node));
  assert.equal(nodeFacts(trimmed).uninitialized, true);
  assert.deepEqual(trimmed.metadata, { name: "n1", resourceVersion: "7" });
  assert.equal(trimmed.status?.conditions, undefined);
});
