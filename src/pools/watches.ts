// What the address pool controller reads from the API, and the fields it keeps of each (kube/fields.ts): each path
// is one that l2ServiceFacts(), announcedFacts(), poolFacts(), AnnouncerLeases or the exclusions (exclusions.ts)
// read, or that a write starts from. Nodes and EndpointSlices as the service controller keeps them
// (loadBalancerNode(), endpointSliceFacts()), plus what the exclusions read of them.
import { EACH, type FieldPath } from "../kube/fields.ts";
import type { KubeObject, ResourceRef } from "../kube/resource.ts";
import { NODE_SELECTOR_ANNOTATION } from "../loadbalancer/service.ts";
import { ENDPOINT_SLICE_FIELDS, NODE_FIELDS } from "../loadbalancer/watches.ts";
import { ALLOCATED_FROM_ANNOTATION, SETTING_ANNOTATIONS } from "./allocate.ts";
import {
  ANNOUNCER_ANNOTATION,
  APPLIED_ANNOTATION,
  CONFLICTS_ANNOTATION,
  GATEWAYS_ANNOTATION,
  RELEASED_FROM_ANNOTATION,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";

/** Labels whole: a pool's serviceSelector may name any. Finalizers whole: the record patch writes the list back. */
export const SERVICE_FIELDS: readonly FieldPath[] = [
  ["metadata", "uid"],
  ["metadata", "creationTimestamp"],
  ["metadata", "deletionTimestamp"],
  ["metadata", "finalizers"],
  ["metadata", "labels"],
  ...[
    ...Object.values(SETTING_ANNOTATIONS).flat(),
    ALLOCATED_FROM_ANNOTATION,
    ANNOUNCER_ANNOTATION,
    RELEASED_FROM_ANNOTATION,
    NODE_SELECTOR_ANNOTATION,
  ].map(
    (key): FieldPath => ["metadata", "annotations", key],
  ),
  ["spec", "type"],
  ["spec", "loadBalancerClass"],
  ["spec", "loadBalancerIP"],
  ["spec", "externalTrafficPolicy"],
  ["spec", "ipFamilies"],
  ["spec", "ports", EACH, "protocol"],
  ["spec", "ports", EACH, "port"],
  ["status", "loadBalancer"],
];

/** Not spec.leaseDurationSeconds: the controller times Leases with its own duration (leases.ts). */
export const LEASE_FIELDS: readonly FieldPath[] = [
  ["metadata", "annotations", SEGMENTS_ANNOTATION],
  ["metadata", "annotations", GATEWAYS_ANNOTATION],
  ["metadata", "annotations", APPLIED_ANNOTATION],
  ["metadata", "annotations", CONFLICTS_ANNOTATION],
  ["spec", "renewTime"],
];

/** Finalizers whole: the finalizer patch writes the list back. */
export const POOL_FIELDS: readonly FieldPath[] = [
  ["metadata", "generation"],
  ["metadata", "deletionTimestamp"],
  ["metadata", "finalizers"],
  ["spec"],
  ["status"],
];

/** Pod CIDRs are never handed out. */
export const POOL_NODE_FIELDS: readonly FieldPath[] = [...NODE_FIELDS, ["spec", "podCIDRs"]];

/**
 * The API server's endpoints (the slices of default/kubernetes) are never handed out. The one EndpointSlice watch
 * is shared, so every slice keeps its endpoints' addresses while this controller runs: about 100 bytes an endpoint.
 */
export const POOL_ENDPOINT_SLICE_FIELDS: readonly FieldPath[] = [
  ...ENDPOINT_SLICE_FIELDS,
  ["endpoints", EACH, "addresses"],
];

/** networking.k8s.io/v1 ServiceCIDR (kubernetes-types predates it): the ranges ClusterIPs come from. */
export interface ServiceCIDR extends KubeObject {
  spec?: { cidrs?: string[] };
}

export const SERVICE_CIDR_RESOURCE: ResourceRef = { group: "networking.k8s.io", version: "v1", plural: "servicecidrs" };
export const SERVICE_CIDR_FIELDS: readonly FieldPath[] = [["spec", "cidrs"]];
