// What the service controller reads from the API: three resources, and the fields it keeps of each
// (kube/fields.ts). Kept small for 5,000 Nodes, 2,000 Services and 20,000 EndpointSlices: each
// path is a field that serviceFacts(), loadBalancerNode() or endpointSliceFacts() reads, or that a write starts from.
// A ClusterIP Service keeps these fields too (paths cannot depend on the type): a few hundred bytes each.
import { EACH, type FieldPath } from "../kube/fields.ts";
import { NODE_SELECTOR_ANNOTATION } from "./decide.ts";
import { SERVICE_NAME_LABEL } from "./endpoints.ts";

/** The finalizers whole: the finalizer patch writes the list back. The status whole: it is compared as written. */
export const SERVICE_FIELDS: readonly FieldPath[] = [
  ["metadata", "uid"],
  ["metadata", "creationTimestamp"],
  ["metadata", "deletionTimestamp"],
  ["metadata", "finalizers"],
  ["metadata", "annotations", NODE_SELECTOR_ANNOTATION],
  ["spec", "type"],
  ["spec", "loadBalancerClass"],
  ["spec", "externalTrafficPolicy"],
  ["spec", "ipFamilies"],
  ["spec", "ports", EACH, "protocol"],
  ["spec", "ports", EACH, "port"],
  ["status", "loadBalancer"],
];

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
