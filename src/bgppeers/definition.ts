// The bgppeer-status controller as node-lifecycle-controller hosts it (manager/registry.ts): no flags of its own, its
// metrics, RBAC, the watches it reads (BGPPeers, and Nodes trimmed to their labels, Ready and the agents' session
// report) and how it is created. Off by default: the chart turns it on with bgp.enabled, the switch that also runs
// the agents' speakers (whose reports it reads) and ships nothing else of its own (the BGPPeer CRD is in crds/).
import type { Node } from "kubernetes-types/core/v1.js";
import type { FieldPath } from "../kube/fields.ts";
import { NODE_RESOURCE, Resource } from "../kube/resource.ts";
import { watch } from "../kube/sharedinformers.ts";
import { defineController } from "../controller/definition.ts";
import { PeerStatusController } from "./controller.ts";
import { createPeerStatusMetrics } from "./metrics.ts";
import { BGP_PEER_RESOURCE, type BGPPeer } from "./peer.ts";
import { SESSIONS_ANNOTATION } from "./sessions.ts";

/** Labels whole: a peer's nodeSelector may name any. uid: the Events about a refused report name it. */
export const PEER_STATUS_NODE_FIELDS: readonly FieldPath[] = [
  ["metadata", "uid"],
  ["metadata", "labels"],
  ["metadata", "annotations", SESSIONS_ANNOTATION],
  ["status", "conditions", { where: { type: "Ready" } }, "status"],
];

const WATCHES = {
  peers: watch<BGPPeer>({ resource: BGP_PEER_RESOURCE, keep: [["spec", "nodeSelector"], ["status"]] }),
  nodes: watch<Node>({ resource: NODE_RESOURCE, keep: PEER_STATUS_NODE_FIELDS }),
};

export const bgpPeerStatus = defineController({
  name: "bgppeer-status",
  enabledByDefault: false,
  helmEnabled: ["bgp.enabled"],
  summary:
    "Writes each BGPPeer's status (the ESTABLISHED and NODES columns of `kubectl get bgppeer`): the nodes its " +
    "nodeSelector selects, how many of them are Ready and report the session Established in their " +
    "local-ccm.io/bgp-sessions annotation, and up to 10 others with their state or why they have none.",
  flags: [] as const,
  parse: () => ({}),
  metricsSubsystem: "bgppeer_status_",
  createMetrics: createPeerStatusMetrics,
  rbac: {
    cluster: [
      { apiGroups: [""], resources: ["nodes"], verbs: ["list", "watch"] },
      { apiGroups: ["local-ccm.io"], resources: ["bgppeers"], verbs: ["list", "watch"] },
      { apiGroups: ["local-ccm.io"], resources: ["bgppeers/status"], verbs: ["patch"] },
    ],
  },
  watches: () => WATCHES,
  create(context) {
    const { peers, nodes } = context.caches;
    const controller = new PeerStatusController({
      peers,
      nodes,
      peerResource: new Resource<BGPPeer>(context.client, BGP_PEER_RESOURCE),
      isLeader: context.isLeader,
      events: context.events,
      log: context.log,
      metrics: context.metrics,
    });
    peers.addHandlers(controller.peerHandlers);
    nodes.addHandlers(controller.nodeHandlers);
    return controller;
  },
});
