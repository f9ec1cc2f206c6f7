// What the address pool controller reads from the API, and the fields it keeps of each (kube/fields.ts): each path
// is one that l2ServiceFacts(), poolFacts() or nodeAddresses() reads, or that a write starts from.
import { EACH, type FieldPath } from "../kube/fields.ts";
import {
  ALLOCATED_FROM_ANNOTATION,
  POOL_ANNOTATION,
  REQUESTED_IPS_ANNOTATION,
  SHARING_ANNOTATION,
} from "./allocate.ts";

/** Labels whole: a pool's serviceSelector may name any. Finalizers whole: the record patch writes the list back. */
export const SERVICE_FIELDS: readonly FieldPath[] = [
  ["metadata", "uid"],
  ["metadata", "creationTimestamp"],
  ["metadata", "deletionTimestamp"],
  ["metadata", "finalizers"],
  ["metadata", "labels"],
  ...[REQUESTED_IPS_ANNOTATION, POOL_ANNOTATION, SHARING_ANNOTATION, ALLOCATED_FROM_ANNOTATION].map(
    (key): FieldPath => ["metadata", "annotations", key],
  ),
  ["spec", "type"],
  ["spec", "loadBalancerClass"],
  ["spec", "loadBalancerIP"],
  ["spec", "ipFamilies"],
  ["spec", "ports", EACH, "protocol"],
  ["spec", "ports", EACH, "port"],
  ["status", "loadBalancer"],
];

export const NODE_FIELDS: readonly FieldPath[] = [
  ["status", "addresses", EACH, "type"],
  ["status", "addresses", EACH, "address"],
];

export const POOL_FIELDS: readonly FieldPath[] = [["spec"], ["status"]];
