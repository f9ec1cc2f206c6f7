// What every LoadBalancer controller keeps of Nodes and EndpointSlices (kube/fields.ts): the fields that
// loadBalancerNode() (nodes.ts) and endpointSliceFacts() (endpoints.ts) read. Kept small for 5,000 Nodes and
// 20,000 EndpointSlices.
import { EACH, type FieldPath } from "../kube/fields.ts";
import { SERVICE_NAME_LABEL } from "./endpoints.ts";

/** Labels whole: --lb-node-selector and the per-Service annotation may name any. */
export const NODE_FIELDS: readonly FieldPath[] = [
  ["metadata", "labels"],
  ["metadata", "deletionTimestamp"],
  ["spec", "taints", EACH, "key"],
  ["status", "conditions", { where: { type: "Ready" } }, "status"],
  ["status", "addresses", EACH, "type"],
  ["status", "addresses", EACH, "address"],
];

export const ENDPOINT_SLICE_FIELDS: readonly FieldPath[] = [
  ["metadata", "labels", SERVICE_NAME_LABEL],
  ["endpoints", EACH, "nodeName"],
  ["endpoints", EACH, "conditions", "ready"],
];
