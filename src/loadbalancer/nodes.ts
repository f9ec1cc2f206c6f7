// The Nodes as the service controller sees them: whether a Node may carry LoadBalancer traffic (ordered rules, a
// rule id for metrics and a reason for logs), and its first ExternalIP and InternalIP of each family. Computed
// once per Node event (loadBalancerNode), so that a plan over every Service reads plain facts and hashes nothing twice.
import type { Node } from "kubernetes-types/core/v1.js";
import { parseBool } from "../cli/flags.ts";
import { type LabelSelector, matchesLabels } from "../kube/labelselector.ts";
import { isUninitialized, UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import { canonicalIp, ipFamily } from "../net/ip.ts";
import { hashString } from "./rendezvous.ts";

/** The label that takes a Node out of every load balancer (kubeadm sets it on control-plane nodes). */
export const EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers";
/** The taint the cluster autoscaler sets on a Node it is about to delete. */
export const AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler";

export type IpFamily = "IPv4" | "IPv6";
export type AddressType = "ExternalIP" | "InternalIP";

/** A Node's first address of each type, per family (canonical text). */
export type NodeIps = Record<IpFamily, Partial<Record<AddressType, string>>>;

export type NodeRule =
  | "deleting"
  | "uninitialized"
  | "autoscaler"
  | "not-ready"
  | "ready-unknown"
  | "excluded"
  | "node-selector";

export interface LoadBalancerNode {
  name: string;
  /** Why the Node carries no LoadBalancer traffic; undefined when it may. */
  ineligible: { rule: NodeRule; reason: string } | undefined;
  /** For per-Service node selectors (the annotation). */
  labels: Record<string, string>;
  ips: NodeIps;
  /** The name's hash, for rendezvous hashing (rendezvous.ts). */
  hash: number;
}

const ADDRESS_TYPES: readonly string[] = ["ExternalIP", "InternalIP"] satisfies AddressType[];

export function loadBalancerNode(node: Node, nodeSelector: LabelSelector | undefined): LoadBalancerNode {
  const name = node.metadata?.name ?? "";
  const labels = node.metadata?.labels ?? {};
  const ips: NodeIps = { IPv4: {}, IPv6: {} };
  for (const { type, address } of node.status?.addresses ?? []) {
    const ip = canonicalIp(address);
    if (ip === undefined || !ADDRESS_TYPES.includes(type)) continue;
    const family: IpFamily = ipFamily(ip) === 6 ? "IPv6" : "IPv4";
    ips[family][type as AddressType] ??= ip;
  }
  return { name, ineligible: ineligibility(node, labels, nodeSelector), labels, ips, hash: hashString(name) };
}

/**
 * The rules in order. Cordoned Nodes stay (KEP-3836: kube-proxy still forwards through them, and draining a
 * node must not take its load-balancer traffic away before its pods are gone). NotReady leaves at once: unlike a
 * cloud load balancer, clients do not health-check the addresses they are given.
 */
function ineligibility(
  node: Node,
  labels: Record<string, string>,
  nodeSelector: LabelSelector | undefined,
): LoadBalancerNode["ineligible"] {
  if (node.metadata?.deletionTimestamp) return { rule: "deleting", reason: "is being deleted" };
  if (isUninitialized(node)) return { rule: "uninitialized", reason: `has the ${UNINITIALIZED_TAINT} taint` };
  if ((node.spec?.taints ?? []).some((taint) => taint.key === AUTOSCALER_TAINT))
    return { rule: "autoscaler", reason: `has the ${AUTOSCALER_TAINT} taint` };
  const ready = node.status?.conditions?.find((condition) => condition.type === "Ready")?.status;
  // Unknown: kubelet's heartbeat went missing, not kubelet saying the node is not ready (announcers.ts reads it so).
  if (ready === "Unknown") return { rule: "ready-unknown", reason: "is not Ready (Unknown: its kubelet stopped reporting)" };
  if (ready !== "True") return { rule: "not-ready", reason: `is not Ready (${ready ?? "no Ready condition"})` };
  if (isExcluded(labels))
    return { rule: "excluded", reason: `has the label ${EXCLUDE_LABEL}=${labels[EXCLUDE_LABEL]}` };
  if (nodeSelector && !matchesLabels(nodeSelector, labels))
    return { rule: "node-selector", reason: `does not match the node selector ${nodeSelector.text}` };
  return undefined;
}

/**
 * As k8s.io/cloud-provider's service controller reads the label (controllers/service/controller.go,
 * nodeIncludedPredicate, v0.36.3): absent includes; a value Go's strconv.ParseBool reads as true excludes, as
 * false includes; any other value excludes (ParseBool fails). Not "present excludes": "false" keeps the node.
 */
export function isExcluded(labels: Record<string, string>): boolean {
  if (!Object.hasOwn(labels, EXCLUDE_LABEL)) return false;
  return parseBool(labels[EXCLUDE_LABEL] as string) !== false;
}

/** Whether two facts of one Node plan alike (the hash follows from the name). */
export function sameLoadBalancerNode(a: LoadBalancerNode, b: LoadBalancerNode): boolean {
  return (
    a.ineligible?.rule === b.ineligible?.rule &&
    JSON.stringify(a.ips) === JSON.stringify(b.ips) &&
    JSON.stringify(a.labels) === JSON.stringify(b.labels)
  );
}
