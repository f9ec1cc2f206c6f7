// The service controller's flags (lb-*): which Services it claims, which nodes carry them, how many per Service,
// and the ports it refuses. They join the central program's one flag table; Helm values under loadBalancer.
import { type FlagValues, flag } from "../cli/flags.ts";
import { eachItem, inRange, parses } from "../cli/validate.ts";
import { parseLabelSelector } from "../kube/labelselector.ts";
import type { PortRange, ServiceConfig } from "./decide.ts";

const HELM = "loadBalancer.";

/**
 * What the nodes serve themselves, which a Service's port on a node address would take over through kube-proxy:
 * ssh, etcd, the API server, kubelet, kube-proxy's health check, and the agent's and the controller's health
 * and metrics ports (10263-10266).
 */
export const DEFAULT_RESERVED_PORTS = "22,2379-2380,6443,10250,10256,10263-10266";

/** "80" or "8000-8080": one line naming the problem when it is neither. */
export function parsePortRange(text: string): PortRange {
  const match = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(text.trim());
  const from = Number(match?.[1]);
  const to = match?.[2] === undefined ? from : Number(match[2]);
  if (!match || from < 1 || to > 65_535 || from > to)
    throw new Error(`"${text}" is not a port (1-65535) or a range of ports (from-to)`);
  return { from, to };
}

export const serviceFlagTable = [
  flag({
    name: "lb-claim-classless",
    type: "bool",
    default: "false",
    help:
      "Service controller: also give addresses to LoadBalancer Services without a loadBalancerClass (off: " +
      "MetalLB, Cilium and kube-vip claim those too). Services of class local-ccm.io/node-address are always ours.",
    helm: `${HELM}claimClassless`,
  }),
  flag({
    name: "lb-node-selector",
    type: "string",
    default: "",
    help:
      "Service controller: label selector of the nodes whose addresses Services may get (e.g. " +
      "node-role.example.com/edge); empty: every eligible node. A Service narrows it with the annotation " +
      "local-ccm.io/node-selector.",
    helm: `${HELM}nodeSelector`,
    validate: parses(parseLabelSelector),
  }),
  flag({
    name: "lb-max-nodes",
    type: "int",
    default: "16",
    help:
      "Service controller: at most this many nodes' addresses per Service, chosen by rendezvous hashing so that " +
      "a node joining or leaving changes only its own entry (keeps status small at thousands of nodes).",
    helm: `${HELM}maxNodes`,
    validate: inRange(1, 1000),
  }),
  flag({
    name: "lb-reserved-ports",
    type: "list",
    default: DEFAULT_RESERVED_PORTS,
    help:
      "Service controller: ports and ranges (from-to) the nodes serve themselves; a Service asking for one is " +
      "refused, on any protocol. Empty: none.",
    helm: `${HELM}reservedPorts`,
    validate: eachItem(parses(parsePortRange)),
  }),
] as const;

/** The controller's config; the table's checks have passed, so the selector and ports parse without error. */
export function serviceConfig(values: FlagValues<typeof serviceFlagTable>): ServiceConfig {
  const selector = values["lb-node-selector"];
  return {
    claimClassless: values["lb-claim-classless"],
    ...(selector ? { nodeSelector: parseLabelSelector(selector) } : {}),
    maxNodes: values["lb-max-nodes"],
    reservedPorts: values["lb-reserved-ports"].map(parsePortRange),
  };
}
