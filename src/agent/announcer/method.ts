// The seam between the method-neutral announcing loop (announcing.ts: whether this node announces, its Service
// watch, what it must announce) and a way of announcing, each a folder: arp-ndp/ (one node per address, answered on
// a link) and bgp/ (every eligible node, routes to peers). The loop calls a method through these two interfaces
// only, and imports no method: the program hands it the definition it configured (a method's modules load only then).
import type { Service } from "kubernetes-types/core/v1.js";
import type { Informer } from "../../kube/informer.ts";
import type { Desired, Refusal } from "./desired.ts";

/** The loop's Service watch as a method may read it (ARP/NDP's Lease tells how far it has read, and asks a relist). */
export type ServiceView = Pick<Informer<Service>, "list" | "lastResourceVersion" | "relist">;

/** A method at work on this node. */
export interface AnnouncementMethod<Rule extends string = string> {
  /**
   * Brings what is announced in line with `desired`: everything this node must announce now, each address once
   * (the method decides where and how, and may leave an address out for a rule of its own). Called on every change;
   * never throws, never waits (what it sends goes out in the background).
   */
  apply(desired: Desired<Rule>): void;
  /**
   * Withdraws everything first, then lets go of what it holds (sockets, sessions, a Lease); no apply() follows.
   * `shutdown`: the agent is stopping (SIGTERM), not the node leaving the method: a method whose peers keep its
   * routes across a restart (BGP graceful restart) may leave them in place.
   */
  stop(shutdown: boolean): Promise<void>;
}

/** Whether this node announces by a method at all: its decision, with a rule id (metrics) and a reason (logs). */
export interface Selection<Rule extends string = string> {
  announce: boolean;
  rule: Rule;
  reason: string;
}

/** The rule every method returns while this node's Node is not known (not registered yet, or deleted). */
export const NODE_UNKNOWN = "node-unknown";

/** How the loop starts a method and which Services it watches for it. */
export interface MethodDefinition<Rule extends string = string> {
  /** The prefix of the loop's log lines ("L2"). */
  name: string;
  /**
   * Whether this node announces by the method, from its Node's labels (undefined while the Node is not known:
   * rule NODE_UNKNOWN) and whatever else the method reads (ARP/NDP: its flag; BGP: the BGPPeers).
   */
  select(labels: Record<string, string> | undefined): Selection;
  /** Every rule select() returns: the values of the method's selection gauge. */
  selectionRules: readonly string[];
  /** The Services this node watches (by label), and the annotations of theirs that `refuse` reads. */
  watch: { labelSelector?: string; annotations: readonly string[] };
  /** The method's own reason not to announce a Service here, checked before the shared ones (desired.ts). */
  refuse(service: Service): Refusal<Rule> | undefined;
  /**
   * Starts the method (what it must announce: nothing yet); `apply` follows the watch's first full list, then each
   * change it sees, and each call of `redecide` (what `refuse` reads of the method's own changed: the Node,
   * endpoints). Before that first list, `redecide` applies nothing.
   */
  start(services: ServiceView, redecide: () => void): Promise<AnnouncementMethod<Rule>>;
  /** This node does not announce: removes what a crashed earlier run of the method may have left (a Lease). */
  clearLeftovers(): Promise<void>;
}
