// The service controller's flags (lb-*): which Services it claims, which nodes carry them, how many per Service, the
// ports it refuses (the nodes' own, and kube-apiserver's NodePort range), and when Ready=Unknown is no news
// (outage.ts). They join the central program's one flag
// table; Helm values under loadBalancer.
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

/** kube-apiserver's default --service-node-port-range. */
export const DEFAULT_NODE_PORT_RANGE = "30000-32767";

/** What Go's strings.TrimSpace trims (unicode.IsSpace): not JavaScript's trim(), which also takes U+FEFF. */
const GO_SPACE = "[\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const GO_TRIM = new RegExp(`^${GO_SPACE}+|${GO_SPACE}+$`, "gu");

/** Go's strconv.Atoi on a port's text: an optional sign and decimal digits (large values fail the range check). */
function atoi(text: string, whole: string): number {
  if (!/^[+-]?[0-9]+$/.test(text)) throw new Error(`"${whole}" is not a port range (from-to, from+offset or one port)`);
  return Number(text);
}

/**
 * A port range as kube-apiserver reads --service-node-port-range (k8s.io/apimachinery's utilnet.PortRange.Set,
 * v0.36.3): "from-to", "base+offset" or one port; empty means kube-apiserver's default, as it does there. Tested
 * against that Go code (test/oracle/portrange.test.ts).
 */
export function parseNodePortRange(text: string): PortRange {
  const value = text.replace(GO_TRIM, "");
  if (value === "") return parseNodePortRange(DEFAULT_NODE_PORT_RANGE);
  const [hyphen, plus] = [value.indexOf("-"), value.indexOf("+")];
  let from: number;
  let to: number;
  if (hyphen === -1 && plus === -1) from = to = atoi(value, text);
  else if (plus === -1) [from, to] = [atoi(value.slice(0, hyphen), text), atoi(value.slice(hyphen + 1), text)];
  else if (hyphen === -1) {
    from = atoi(value.slice(0, plus), text);
    to = from + atoi(value.slice(plus + 1), text);
  } else throw new Error(`"${text}" is not a port range (from-to, from+offset or one port)`);
  if (from > 65_535 || to > 65_535) throw new Error(`"${text}": a port range cannot go above 65535`);
  if (to < from) throw new Error(`"${text}": the range ends below its start`);
  return { from, to };
}

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
    helm: `${HELM}nodeAddress.nodes`,
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
  flag({
    name: "lb-node-port-range",
    type: "string",
    default: DEFAULT_NODE_PORT_RANGE,
    help:
      "Service controller: kube-apiserver's --service-node-port-range (same syntax; empty: its default). A " +
      "Service asking for a port in it is refused, on any protocol: any Service may get it as a NodePort on " +
      "every node.",
    helm: `${HELM}nodePortRange`,
    validate: parses(parseNodePortRange),
  }),
  flag({
    name: "lb-unknown-threshold",
    type: "float",
    default: "0.55",
    help:
      "Service controller: while at least this fraction of the Nodes (0 < x <= 1), or all of them, is " +
      "Ready=Unknown, kube-controller-manager's view is taken as stale (an API outage) and those nodes stay in " +
      "the ingress; 0.55 as kube-controller-manager's --unhealthy-zone-threshold.",
    helm: `${HELM}nodeAddress.unknownThreshold`,
    validate: (value) => (value > 0 && value <= 1 ? undefined : "must be greater than 0 and at most 1"),
  }),
  flag({
    name: "lb-unknown-grace",
    type: "duration",
    default: "20s",
    help:
      "Service controller: a node that turns Ready=Unknown stays in the ingress this long, and as long after " +
      "a mass Unknown (--lb-unknown-threshold) ends, before it leaves as a dead node: kube-controller-manager " +
      "marks Nodes, and kubelets correct them, one at a time. 0: at once (the guard then sees only what arrives " +
      "at once).",
    helm: `${HELM}nodeAddress.unknownGrace`,
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
    nodePortRange: parseNodePortRange(values["lb-node-port-range"]),
    unknownGuard: { threshold: values["lb-unknown-threshold"], graceMs: values["lb-unknown-grace"] },
  };
}
