// A LoadBalancer Service as every mode reads it, whatever gives it its addresses: the standard finalizer, the
// per-Service node selector, its ports, and the order in which older Services claim first.
import { type LabelSelector, parseLabelSelector } from "../kube/labelselector.ts";

/** A label selector: only matching nodes carry this Service (on top of --lb-node-selector). */
export const NODE_SELECTOR_ANNOTATION = "local-ccm.io/node-selector";
/** k8s.io/cloud-provider's (service/helpers): kubectl users and the upstream e2e suite expect this one. */
export const LB_FINALIZER = "service.kubernetes.io/load-balancer-cleanup";

export interface ServicePort {
  protocol: string;
  port: number;
}

/** Older first; Services created in the same second by key (namespace/name). */
export function byAge(a: { created: string; key: string }, b: { created: string; key: string }): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** The annotation's selector, undefined without one, or the refusal's reason when it does not parse. */
export function annotationSelector(text: string | undefined): LabelSelector | string | undefined {
  if (text === undefined) return undefined;
  try {
    return parseLabelSelector(text);
  } catch (err) {
    return `annotation ${NODE_SELECTOR_ANNOTATION}: ${(err as Error).message}`;
  }
}
