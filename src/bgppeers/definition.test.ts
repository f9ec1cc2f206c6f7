// The watches keep what the status reads: the facts of a trimmed object are those of the whole one.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Node } from "kubernetes-types/core/v1.js";
import { keepTransform } from "../kube/fields.ts";
import type { KubeObject } from "../kube/resource.ts";
import type { Watch } from "../kube/sharedinformers.ts";
import { bgpPeerStatus } from "./definition.ts";
import type { BGPPeer } from "./peer.ts";
import { SESSIONS_ANNOTATION, sessionReportText } from "./sessions.ts";
import { decidePeerStatus, nodeSessionFacts } from "./status.ts";

const watches = bgpPeerStatus.watches({});
const trim = <T extends KubeObject>(watch: Watch<T>, obj: T) => keepTransform(watch.keep)(obj) as T;

test("a Node keeps its labels, Ready and its report; a BGPPeer its nodeSelector and status; the rest goes", () => {
  const node: Node = {
    metadata: {
      name: "node-1",
      uid: "u1",
      labels: { rack: "r1" },
      annotations: { [SESSIONS_ANNOTATION]: sessionReportText({ tor: "Established" }), other: "x".repeat(1000) },
    },
    spec: { podCIDR: "10.244.1.0/24", taints: [{ key: "k", effect: "NoSchedule" }] },
    status: {
      addresses: [{ type: "InternalIP", address: "192.0.2.10" }],
      conditions: [
        { type: "MemoryPressure", status: "False" },
        { type: "Ready", status: "True", reason: "KubeletReady", lastHeartbeatTime: "2026-11-27T00:00:00Z" },
      ],
    },
  };
  const trimmed = trim(watches.nodes, node);
  assert.deepEqual(nodeSessionFacts(trimmed), nodeSessionFacts(node));
  assert.deepEqual(trimmed.metadata?.annotations, { [SESSIONS_ANNOTATION]: '{"tor":"Established"}' });
  assert.equal(trimmed.spec, undefined);
  assert.equal(trimmed.status?.addresses, undefined);

  const peer: BGPPeer = {
    metadata: { name: "tor" },
    spec: { peerAddress: "192.0.2.1", peerASN: 64512, myASN: 64513, nodeSelector: { matchLabels: { rack: "r1" } } },
    status: { nodes: 1, established: 0, notEstablished: ["node-1: Active"] },
  };
  const kept = trim(watches.peers, peer);
  assert.deepEqual(kept.status, peer.status);
  assert.deepEqual(decidePeerStatus(kept, [nodeSessionFacts(trimmed)]), decidePeerStatus(peer, [nodeSessionFacts(node)]));
  assert.equal(kept.spec?.peerAddress, undefined);
});
