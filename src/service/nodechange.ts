// Which Services' intents one Node's change can alter, so that a Node event replans only those. At 5,000 nodes a
// plan from scratch ranks every node for every Cluster Service (about a second under --jitless on a loaded
// 2-core machine), while a node going NotReady is in the ingress of a few. Rendezvous hashing makes the answer
// exact for the many Services whose candidates are all eligible nodes: a node leaving alters only the Services
// that chose it, a node joining only those where it outranks the last node chosen. Local Services (their
// candidates are the few nodes with endpoints) and those with a node selector annotation are replanned: cheap or rare.
import type { IpFamily, LoadBalancerNode } from "../loadbalancer/nodes.ts";
import { hashString, outranks, pairScore } from "../loadbalancer/rendezvous.ts";
import type { Intent, ServiceFacts } from "./decide.ts";

/** One Node's facts before and after an event (undefined: absent, i.e. added or deleted). */
export interface NodeChange {
  before: LoadBalancerNode | undefined;
  after: LoadBalancerNode | undefined;
}

/** Per family, whether some eligible node has an ExternalIP of it: the ingress then takes ExternalIPs. */
export type ExternalFamilies = Record<IpFamily, boolean>;

export interface ChangeContext {
  maxNodes: number;
  external: { before: ExternalFamilies; after: ExternalFamilies };
}

const isEligible = (node: LoadBalancerNode | undefined): node is LoadBalancerNode => node !== undefined && !node.ineligible;

/** Whether the intent planIngress() made for a Service alone (before port conflicts) holds after the change. */
export function intentHolds(facts: ServiceFacts, intent: Intent, change: NodeChange, context: ChangeContext): boolean {
  // A reserved port or an invalid annotation reads no node.
  if (intent.action === "refuse") return true;
  if (facts.local || facts.nodeSelector !== undefined) return false;
  const { before, after } = change;
  const was = isEligible(before);
  const is = isEligible(after);
  if (!was && !is) return true;
  // Which address type each family takes is decided over all candidates: when it flips, every entry may.
  const { external } = context;
  if (facts.ipFamilies.some((family) => external.before[family] !== external.after[family])) return false;
  if (was && is) return JSON.stringify(before.ips) === JSON.stringify(after.ips);
  if (was) return !intent.nodes.includes(before.name);
  const joining = after as LoadBalancerNode;
  const usable = facts.ipFamilies.some(
    (family) => joining.ips[family][external.after[family] ? "ExternalIP" : "InternalIP"] !== undefined,
  );
  if (!usable) return true;
  if (intent.nodes.length < context.maxNodes) return false;
  const serviceHash = hashString(facts.uid);
  const score = pairScore(serviceHash, joining.hash);
  return intent.nodes.every((name) => outranks(pairScore(serviceHash, hashString(name)), name, score, joining.name));
}
