// What the service controller reads from the API: four resources, and the fields it keeps of each
// (kube/fields.ts). Kept small for 5,000 Nodes, 2,000 Services and 20,000 EndpointSlices: each
// path is a field that serviceFacts(), serviceNodePorts(), loadBalancerNode() or endpointSliceFacts() reads, or that
// a write starts from. A ClusterIP Service keeps these fields too (paths cannot depend on the type): a few hundred
// bytes each. Pods (100,000 in a large cluster) are kept only when they hold a port on their node (trimPod).
import type { Container, Pod } from "kubernetes-types/core/v1.js";
import { EACH, type FieldPath } from "../kube/fields.ts";
import type { ResourceRef } from "../kube/resource.ts";
import { NODE_SELECTOR_ANNOTATION } from "../loadbalancer/service.ts";

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
  ["spec", "ports", EACH, "nodePort"],
  ["status", "loadBalancer"],
];

export const POD_RESOURCE: ResourceRef = { group: "", version: "v1", plural: "pods" };

/**
 * Pods bound to a node and not finished: an unbound pod holds no port yet, a finished one none any more (the API
 * server tells a pod that leaves this selection as deleted, which lifts a refusal it caused). Selected by the server
 * so that the many pods that never hold a port on their node are never sent twice: the watch still carries every
 * running pod once, and trimPod() drops most at once.
 */
export const POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/**
 * A pod as podPorts() (holders.ts) reads it, or undefined, not cached at all, when it holds no port on its node (no
 * hostNetwork, no hostPort): the few pods per node that do cost a few hundred bytes each, the rest nothing.
 * A transform of its own, not field paths: paths cannot drop a whole object, and nothing else watches pods.
 */
export function trimPod(pod: Pod): Pod | undefined {
  const { metadata = {}, spec } = pod;
  const hostNetwork = spec?.hostNetwork === true;
  const withPorts = (containers: Container[] = []) =>
    containers.flatMap(({ name, ports = [] }) => {
      const held = ports
        .filter(({ hostPort }) => hostNetwork || hostPort)
        .map(({ protocol, containerPort, hostPort }) => ({ protocol, containerPort, hostPort }));
      return held.length ? [{ name, ports: held }] : [];
    });
  const containers = withPorts(spec?.containers);
  const initContainers = withPorts(spec?.initContainers);
  if (!containers.length && !initContainers.length) return undefined;
  const { name, namespace, resourceVersion, creationTimestamp } = metadata;
  return {
    metadata: { name, namespace, resourceVersion, creationTimestamp },
    spec: {
      nodeName: spec?.nodeName,
      ...(hostNetwork ? { hostNetwork } : {}),
      containers,
      ...(initContainers.length ? { initContainers } : {}),
    },
  };
}
