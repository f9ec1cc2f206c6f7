// The service controller's decisions in node-address mode, as pure functions of plain data.
//
// planIngress() looks at every Service of ours at once, because port conflicts make Services depend on each other:
// oldest first, each gets the addresses of up to N eligible nodes (loadbalancer/rendezvous.ts), or a refusal.
// Ports are checked against what kube-proxy would otherwise deliver on those node addresses (it matches load-balancer
// IPs before NodePorts and local delivery, so a Service's port there takes the others' place): other Services'
// NodePorts (every node), pods' hostPorts and hostNetwork pods' ports (their node), and the NodePort range; the older
// claim keeps a port, whoever holds it. decide() then tells, for one Service, whether it is ours and what it should
// hold: an ingress, nothing (refused), or nothing and no finalizer (released). Every answer carries a rule id for
// metrics and a reason for logs and Events.
//
// Addresses, per family of spec.ipFamilies in their order: the ExternalIPs of the chosen nodes, or their InternalIPs
// when no candidate node has an ExternalIP of that family (decided per family, so that a cluster with public IPv6 and
// private IPv4 offers both). One address per node and family, sorted, ipMode VIP: an unchanged set is the same list,
// and writes nothing.
import type { LoadBalancerIngress, Service } from "kubernetes-types/core/v1.js";
import { objectKey } from "../kube/informer.ts";
import { type LabelSelector, matchesLabels } from "../kube/labelselector.ts";
import type { AddressType, IpFamily, LoadBalancerNode } from "../loadbalancer/nodes.ts";
import { hashString, topByScore } from "../loadbalancer/rendezvous.ts";
import {
  annotationSelector,
  byAge,
  LB_FINALIZER,
  NODE_SELECTOR_ANNOTATION,
  type ServicePort,
} from "../loadbalancer/service.ts";
import { ipToBytes } from "../net/ip.ts";
import type { UnknownGuardConfig } from "./outage.ts";

export const NODE_ADDRESS_CLASS = "local-ccm.io/node-address";

export interface PortRange {
  from: number;
  to: number;
}

export interface ServiceConfig {
  /** Claim Services of type LoadBalancer without a loadBalancerClass too. */
  claimClassless: boolean;
  /** Nodes that carry no Service when they do not match (--lb-node-selector). */
  nodeSelector?: LabelSelector;
  /** Nodes per Service, at most. */
  maxNodes: number;
  /** Ports the nodes serve themselves: a Service on one of them would take it over. */
  reservedPorts: PortRange[];
  /** kube-apiserver's --service-node-port-range: any NodePort, now or later, comes from it. */
  nodePortRange: PortRange;
  /** When Ready=Unknown is no news (outage.ts). */
  unknownGuard: UnknownGuardConfig;
}

export interface ServiceFacts {
  /** namespace/name */
  key: string;
  uid: string;
  /** metadata.creationTimestamp as written (RFC 3339, whole seconds: compares as text). */
  created: string;
  type: string;
  class: string | undefined;
  deleting: boolean;
  local: boolean;
  ipFamilies: IpFamily[];
  ports: ServicePort[];
  /** The node selector annotation's text, if any. */
  nodeSelector: string | undefined;
  finalizer: boolean;
  ingress: LoadBalancerIngress[];
}

export function serviceFacts(service: Service): ServiceFacts {
  const { metadata = {}, spec = {}, status } = service;
  const families = (spec.ipFamilies ?? []).filter(
    (family): family is IpFamily => family === "IPv4" || family === "IPv6",
  );
  return {
    key: objectKey(service),
    uid: metadata.uid ?? "",
    created: metadata.creationTimestamp ?? "",
    type: spec.type ?? "ClusterIP",
    class: spec.loadBalancerClass,
    deleting: Boolean(metadata.deletionTimestamp),
    local: spec.externalTrafficPolicy === "Local",
    ipFamilies: families.length ? families : ["IPv4"],
    ports: (spec.ports ?? []).map(({ protocol, port }) => ({ protocol: protocol ?? "TCP", port })),
    nodeSelector: metadata.annotations?.[NODE_SELECTOR_ANNOTATION],
    finalizer: (metadata.finalizers ?? []).includes(LB_FINALIZER),
    ingress: status?.loadBalancer?.ingress ?? [],
  };
}

/** What planIngress() reads of a Service: when this text is unchanged, so is the plan. */
export function planInputs(facts: ServiceFacts): string {
  const { key, uid, created, type, class: lbClass, deleting, local, ipFamilies, ports, nodeSelector } = facts;
  return JSON.stringify([key, uid, created, type, lbClass, deleting, local, ipFamilies, ports, nodeSelector]);
}

/** Who else takes a protocol/port on a node: a Service's NodePort (every node), a pod (its node). */
export type HolderRule = "node-port" | "host-port" | "host-network-port";

export interface PortHolder {
  rule: HolderRule;
  kind: "Service" | "Pod";
  /** namespace/name */
  key: string;
  /** metadata.creationTimestamp as written (RFC 3339, whole seconds: compares as text). */
  created: string;
}

/** The holders of each protocol/port ("TCP/30080"): on every node, and per node name. */
export interface PortHolders {
  everywhere: ReadonlyMap<string, readonly PortHolder[]>;
  onNode: ReadonlyMap<string, ReadonlyMap<string, readonly PortHolder[]>>;
}

export const NO_HOLDERS: PortHolders = { everywhere: new Map(), onNode: new Map() };

export type RefusalRule = "reserved-port" | "node-selector" | "port-conflict" | "node-port-range" | HolderRule;

/** What a Service of ours should hold. */
export type Intent =
  | {
      action: "ensure";
      /** no-nodes: no eligible node (for Local: none where its ready endpoints are): an empty ingress. */
      rule: "ensured" | "no-nodes";
      ingress: LoadBalancerIngress[];
      nodes: string[];
      /** Families of spec.ipFamilies that no chosen node has an address of: left out. */
      missingFamilies: IpFamily[];
      /** Newer holders of its ports on its nodes: the older claim, this Service's, keeps them (one line each). */
      newerHolders: string[];
      reason: string;
    }
  | { action: "refuse"; rule: RefusalRule; reason: string };

export interface PlanInput {
  services: Iterable<ServiceFacts>;
  /** The eligible nodes only (facts.ineligible undefined). */
  nodes: readonly LoadBalancerNode[];
  /** The nodes with a ready endpoint of a Service (for Local). */
  readyNodes(serviceKey: string): Iterable<string>;
  /** Who else takes ports on the nodes (no Service of ours is one here but by its NodePorts). */
  holders: PortHolders;
  config: ServiceConfig;
}

/** Whether the plan holds this Service: ours, and not being deleted. */
export function isPlanned(facts: ServiceFacts, config: ServiceConfig): boolean {
  return facts.type === "LoadBalancer" && !facts.deleting && claims(facts.class, config);
}

const claims = (lbClass: string | undefined, config: ServiceConfig) =>
  lbClass === NODE_ADDRESS_CLASS || (lbClass === undefined && config.claimClassless);

/**
 * Every planned Service's intent. Older Services claim their ports first: a newer one never takes them away.
 * `alone` holds each Service's intent before port conflicts, filled here and reused when given: a caller that
 * plans after every burst of changes drops only the entries whose inputs changed (all of them when a Node did),
 * and the conflict pass over the rest costs little.
 */
export function planIngress(
  { services, nodes, readyNodes, holders, config }: PlanInput,
  alone = new Map<string, Intent>(),
): Map<string, Intent> {
  const planned = [...services].filter((facts) => isPlanned(facts, config)).sort(byAge);
  let byName: Map<string, LoadBalancerNode> | undefined;
  // Local: the eligible nodes with a ready endpoint. A Service with no ready endpoint anywhere yet (created before
  // its pods, or scaled to zero) gets every eligible node, as Cluster would: no node could serve it either way, and
  // its address is there for DNS and clients from the start (a cloud load balancer's is, and upstream's e2e tests
  // wait for it before they start the pods); the first ready endpoint narrows it to the nodes that hold one.
  const localCandidates = (key: string) => {
    const ready = [...readyNodes(key)];
    if (!ready.length) return nodes;
    byName ??= new Map(nodes.map((node) => [node.name, node]));
    const index = byName;
    return ready.flatMap((name) => index.get(name) ?? []);
  };
  /** "TCP/80 on 192.0.2.1" → the Service holding it. */
  const held = new Map<string, string>();
  const plan = new Map<string, Intent>();
  for (const facts of planned) {
    let intent = alone.get(facts.key);
    if (!intent) {
      intent = intentFor(facts, facts.local ? localCandidates(facts.key) : nodes, config);
      alone.set(facts.key, intent);
    }
    if (intent.action === "ensure") intent = checkHolders(facts, intent, holders, config.nodePortRange);
    plan.set(facts.key, intent.action === "ensure" ? claimPorts(facts, intent, held) : intent);
  }
  return plan;
}

function intentFor(facts: ServiceFacts, nodes: readonly LoadBalancerNode[], config: ServiceConfig): Intent {
  const reserved = reservedPort(facts.ports, config.reservedPorts);
  if (reserved) return { action: "refuse", rule: "reserved-port", reason: reserved };
  const selector = annotationSelector(facts.nodeSelector);
  if (typeof selector === "string") return { action: "refuse", rule: "node-selector", reason: selector };
  const candidates = selector ? nodes.filter((node) => matchesLabels(selector, node.labels)) : nodes;
  return ingressFor(facts, candidates, config.maxNodes);
}

function reservedPort(ports: ServicePort[], reserved: PortRange[]): string | undefined {
  for (const { protocol, port } of ports) {
    const range = reserved.find(({ from, to }) => from <= port && port <= to);
    if (range) return `port ${protocol}/${port} is one the nodes serve themselves (reserved: ${formatRange(range)})`;
  }
  return undefined;
}

export const formatRange = ({ from, to }: PortRange) => (from === to ? `${from}` : `${from}-${to}`);

function ingressFor(facts: ServiceFacts, candidates: readonly LoadBalancerNode[], maxNodes: number): Intent {
  const kinds = facts.ipFamilies.map((family) => [family, addressType(candidates, family)] as const);
  const usable = candidates.filter((node) => kinds.some(([family, type]) => node.ips[family][type] !== undefined));
  const chosen = topByScore(usable, hashString(facts.uid), maxNodes);
  const ingress: LoadBalancerIngress[] = [];
  const missingFamilies: IpFamily[] = [];
  for (const [family, type] of kinds) {
    const ips = sortIps(chosen.flatMap((node) => node.ips[family][type] ?? []));
    if (!ips.length) missingFamilies.push(family);
    for (const ip of ips) ingress.push({ ip, ipMode: "VIP" });
  }
  const nodes = chosen.map((node) => node.name).sort();
  if (!nodes.length) {
    const where = facts.local ? "no node holding a ready endpoint of this Service is eligible" : "no node is eligible";
    return { action: "ensure", rule: "no-nodes", ingress, nodes, missingFamilies: [], newerHolders: [], reason: where };
  }
  const reason = `addresses of ${nodes.length} node(s): ${nodes.join(", ")}`;
  return { action: "ensure", rule: "ensured", ingress, nodes, missingFamilies, newerHolders: [], reason };
}

/** ExternalIPs where any candidate has one of this family, else InternalIPs. */
function addressType(nodes: readonly LoadBalancerNode[], family: IpFamily): AddressType {
  return nodes.some((node) => node.ips[family].ExternalIP) ? "ExternalIP" : "InternalIP";
}

/** In numeric order (each address read once). */
function sortIps(ips: string[]): string[] {
  const keyed = ips.map((ip) => ({ ip, bytes: ipToBytes(ip) }));
  return keyed.sort((a, b) => Buffer.compare(a.bytes, b.bytes)).map(({ ip }) => ip);
}

/**
 * Older claims first: created earlier, then (same second) by kind/namespace/name, so that a pod wins a tie with a
 * Service. A total order, the same whichever side asks.
 */
type Claimant = Pick<PortHolder, "created" | "kind" | "key">;

export function claimOrder(a: Claimant, b: Claimant): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  const [x, y] = [`${a.kind}/${a.key}`, `${b.kind}/${b.key}`];
  return x < y ? -1 : x > y ? 1 : 0;
}

const HOLDER_RULES: readonly HolderRule[] = ["node-port", "host-port", "host-network-port"];

/** A holder of a port, and the node it holds it on (undefined: every node). */
interface Found {
  holder: PortHolder;
  node: string | undefined;
}

/**
 * The intent, unless a port of it is another's on one of its nodes: then a refusal naming the oldest such holder
 * and the port, when that holder is older than the Service. Newer holders do not take the port (the older claim
 * wins) but are listed, for a Warning. Last, the NodePort range: any Service may get a NodePort of it at any time,
 * so a port there is refused even with no holder yet. Holders are checked first so that a refusal names one.
 */
function checkHolders(
  facts: ServiceFacts,
  intent: Intent & { action: "ensure" },
  holders: PortHolders,
  nodePortRange: PortRange,
): Intent {
  const self: Claimant = { kind: "Service", key: facts.key, created: facts.created };
  const byClaim = (a: Found, b: Found) =>
    claimOrder(a.holder, b.holder) ||
    HOLDER_RULES.indexOf(a.holder.rule) - HOLDER_RULES.indexOf(b.holder.rule) ||
    (a.node ?? "").localeCompare(b.node ?? "");
  const newerHolders: string[] = [];
  for (const { protocol, port } of facts.ports) {
    const claim = `${protocol}/${port}`;
    const found: Found[] = [
      ...(holders.everywhere.get(claim) ?? [])
        .filter((holder) => holder.kind !== "Service" || holder.key !== facts.key)
        .map((holder) => ({ holder, node: undefined })),
      ...intent.nodes.flatMap((node) =>
        (holders.onNode.get(node)?.get(claim) ?? []).map((holder) => ({ holder, node })),
      ),
    ].sort(byClaim);
    const [oldest] = found;
    if (oldest && claimOrder(oldest.holder, self) < 0) {
      const { holder, node } = oldest;
      return { action: "refuse", rule: holder.rule, reason: `port ${claim}${where(node)} is ${holding(holder)}` };
    }
    for (const { holder, node } of found)
      newerHolders.push(`port ${claim}${where(node)} is also ${holding(holder, false)}`);
  }
  for (const { protocol, port } of facts.ports)
    if (nodePortRange.from <= port && port <= nodePortRange.to) {
      const reason = `port ${protocol}/${port} is in the NodePort range (${formatRange(nodePortRange)}), from ` +
        "which kube-apiserver gives any Service a NodePort on every node";
      return { action: "refuse", rule: "node-port-range", reason };
    }
  return newerHolders.length ? { ...intent, newerHolders } : intent;
}

const where = (node: string | undefined) => (node === undefined ? "" : ` on node ${node}`);

/** "the NodePort of the older Service/ns/name, open on every node", for a refusal; "newer" for the others. */
function holding(holder: PortHolder, older = true): string {
  const age = older ? "older" : "newer";
  const who = `${holder.kind}/${holder.key}`;
  switch (holder.rule) {
    case "node-port":
      return `the NodePort of the ${age} ${who}, open on every node`;
    case "host-port":
      return `a hostPort of the ${age} ${who}`;
    case "host-network-port":
      return `a port of the ${age} ${who}, which uses the node's network`;
  }
}

/** The ports on the intent's addresses, unless an older Service holds one of them: then a refusal naming it. */
function claimPorts(facts: ServiceFacts, intent: Intent & { action: "ensure" }, held: Map<string, string>): Intent {
  const wanted = facts.ports.flatMap(({ protocol, port }) =>
    intent.ingress.map(({ ip }) => `${protocol}/${port} on ${ip}`),
  );
  for (const claim of wanted) {
    const holder = held.get(claim);
    if (holder !== undefined && holder !== facts.key)
      return { action: "refuse", rule: "port-conflict", reason: `${claim} is held by the older Service ${holder}` };
  }
  for (const claim of wanted) held.set(claim, facts.key);
  return intent;
}

export type ReleaseRule = "deleted" | "not-load-balancer" | "classless-off";
export type IgnoreRule = "type" | "class" | "classless";

export type ServiceDecision =
  | { action: "ignore"; rule: IgnoreRule; reason: string }
  | { action: "release"; rule: ReleaseRule; reason: string }
  | Intent;

export interface DecisionContext {
  config: ServiceConfig;
  /** The plan's intent for this Service (absent when not planned). */
  intent: Intent | undefined;
  /** This process saw the Service as ours (it may since have changed type, which clears its class). */
  held: boolean;
  /** Whether an address is some Node's: an ingress made only of these is one we wrote. */
  isNodeAddress(ip: string): boolean;
}

/**
 * One Service: ignore, release (status and finalizer go), or the plan's intent. The finalizer is shared by every
 * controller built on k8s.io/cloud-provider, so a Service whose class does not name us is released only when it
 * is surely ours: a class-less Service after --lb-claim-classless was turned off when its ingress is made of node
 * addresses only (our signature; an empty one could be another controller's, which would re-add its finalizer
 * and fight us), and a Service that changed type away from LoadBalancer (the API clears its class and status)
 * when class-less ones are claimed or this process saw it ours.
 */
export function decide(facts: ServiceFacts, { config, intent, held, isNodeAddress }: DecisionContext): ServiceDecision {
  if (facts.type !== "LoadBalancer") {
    if (facts.finalizer && (held || config.claimClassless))
      return { action: "release", rule: "not-load-balancer", reason: `type changed to ${facts.type}` };
    return { action: "ignore", rule: "type", reason: `type ${facts.type}` };
  }
  if (facts.class !== undefined && facts.class !== NODE_ADDRESS_CLASS)
    return { action: "ignore", rule: "class", reason: `loadBalancerClass ${facts.class} is not ours` };
  if (facts.class === undefined && !config.claimClassless) {
    const ours = facts.ingress.length > 0 && facts.ingress.every(({ ip }) => ip !== undefined && isNodeAddress(ip));
    if (facts.finalizer && ours)
      return { action: "release", rule: "classless-off", reason: "Services without a class are no longer claimed" };
    return { action: "ignore", rule: "classless", reason: "no loadBalancerClass, and those are not claimed" };
  }
  if (facts.deleting) return { action: "release", rule: "deleted", reason: "the Service is being deleted" };
  // The plan is built from the same cache as the facts, and again whenever a Service's planInputs() change.
  if (!intent) throw new Error(`Service ${facts.key} is ours but not in the plan`);
  return intent;
}

/** Whether the status already holds exactly this ingress (order included: the plan's order is stable). */
export function sameIngress(current: LoadBalancerIngress[], wanted: LoadBalancerIngress[]): boolean {
  const text = (ingress: LoadBalancerIngress[]) =>
    JSON.stringify(ingress.map(({ ip, hostname, ipMode, ports }) => [ip, hostname, ipMode, ports]));
  return text(current) === text(wanted);
}
