// What the service controller reads from the API and may do there: the three watches with the fields each keeps
// (paths as kube/fields.ts takes them: a string steps into a property, {} into every array element), and its
// RBAC rules. Kept small for 5,000 Nodes, 2,000 Services and 20,000 EndpointSlices: each path is a field that
// serviceFacts(), nodeFacts() or endpointSliceFacts() reads, or that a write starts from.
import type { ResourceRef } from "../kube/resource.ts";
import { NODE_SELECTOR_ANNOTATION } from "./decide.ts";
import { SERVICE_NAME_LABEL } from "./endpoints.ts";

type Path = readonly (string | { readonly where?: Readonly<Record<string, string>> })[];
const EACH = {};

export const SERVICE_RESOURCE: ResourceRef = { group: "", version: "v1", plural: "services" };
export const NODE_RESOURCE: ResourceRef = { group: "", version: "v1", plural: "nodes" };
export const ENDPOINT_SLICE_RESOURCE: ResourceRef = {
  group: "discovery.k8s.io",
  version: "v1",
  plural: "endpointslices",
};

/** The finalizers whole: the finalizer patch writes the list back. The status whole: it is compared as written. */
export const SERVICE_FIELDS: readonly Path[] = [
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
export const NODE_FIELDS: readonly Path[] = [
  ["metadata", "labels"],
  ["metadata", "deletionTimestamp"],
  ["spec", "taints", EACH, "key"],
  ["status", "conditions", { where: { type: "Ready" } }, "status"],
  ["status", "addresses", EACH, "type"],
  ["status", "addresses", EACH, "address"],
];

export const ENDPOINT_SLICE_FIELDS: readonly Path[] = [
  ["metadata", "labels", SERVICE_NAME_LABEL],
  ["endpoints", EACH, "nodeName"],
  ["endpoints", EACH, "conditions", "ready"],
];

/**
 * Cluster-wide: Services are in every namespace, and so are the Events about them (the program's own Events
 * grant covers "default" only). The finalizer is a patch of the Service, the ingress one of services/status.
 */
export const SERVICE_RBAC_RULES = [
  { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
  { apiGroups: [""], resources: ["services"], verbs: ["list", "watch", "patch"] },
  { apiGroups: [""], resources: ["services/status"], verbs: ["patch"] },
  { apiGroups: [""], resources: ["nodes"], verbs: ["list", "watch"] },
  { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
];
