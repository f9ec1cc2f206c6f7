// What the address pool controller reads from the API, and the fields it keeps of each (kube/fields.ts): each path
// is one that l2ServiceFacts(), announcedFacts(), poolFacts() or AnnouncerLeases reads, or that a write starts from.
// Nodes and EndpointSlices as the service controller keeps them (loadBalancerNode(), endpointSliceFacts()).
import { EACH, type FieldPath } from "../kube/fields.ts";
import {
  ALLOCATED_FROM_ANNOTATION,
  POOL_ANNOTATION,
  REQUESTED_IPS_ANNOTATION,
  SHARING_ANNOTATION,
} from "./allocate.ts";
import { NODE_SELECTOR_ANNOTATION } from "../service/decide.ts";
import {
  ANNOUNCER_ANNOTATION,
  APPLIED_ANNOTATION,
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
    REQUESTED_IPS_ANNOTATION,
    POOL_ANNOTATION,
    SHARING_ANNOTATION,
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
  ["metadata", "annotations", APPLIED_ANNOTATION],
  ["spec", "renewTime"],
];

export const POOL_FIELDS: readonly FieldPath[] = [["spec"], ["status"]];
