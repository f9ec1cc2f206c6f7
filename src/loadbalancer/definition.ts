// What every LoadBalancer controller's definition shares: the RBAC rules of the Service writes and the watches,
// and the parts it takes from the program.
import type { Service } from "kubernetes-types/core/v1.js";
import { Resource, SERVICE_RESOURCE } from "../kube/resource.ts";
import type { ControllerContext, PolicyRule, Watches } from "../controller/definition.ts";

/**
 * What every LoadBalancer controller needs. Cluster-wide: Services are in every namespace, and so are the Events
 * about them (the program's own Events grant covers "default" only). The finalizer is a patch of the Service, the
 * ingress one of services/status; Nodes for their addresses.
 */
export const LOAD_BALANCER_RULES: readonly PolicyRule[] = [
  { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
  { apiGroups: [""], resources: ["services"], verbs: ["list", "watch", "patch"] },
  { apiGroups: [""], resources: ["services/status"], verbs: ["patch"] },
  { apiGroups: [""], resources: ["nodes"], verbs: ["list", "watch"] },
];

/** For externalTrafficPolicy Local: which nodes hold a ready endpoint. */
export const ENDPOINT_SLICE_RULE: PolicyRule = {
  apiGroups: ["discovery.k8s.io"],
  resources: ["endpointslices"],
  verbs: ["list", "watch"],
};

/** What a LoadBalancer controller takes from the program's shared parts, beside its config and caches. */
export function loadBalancerParts<M>(context: ControllerContext<M, Watches>) {
  const { client, isLeader, events, log, metrics } = context;
  const serviceResource = (namespace: string) => new Resource<Service>(client, { ...SERVICE_RESOURCE, namespace });
  return { isLeader, events, log, metrics, serviceResource };
}
