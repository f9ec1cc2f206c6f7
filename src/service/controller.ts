// The service controller in node-address mode: Services, Nodes, EndpointSlices and Pods from informers → keyed work
// queue (kube/workqueue.ts, per-key backoff) → sync one Service. The plan over all our Services (decide.ts) is built
// once per burst of changes that can alter it and read by every sync after; the Nodes are reduced to facts once per
// Node event (loadbalancer/nodes.ts), the EndpointSlices to the nodes with a ready endpoint, every Service's
// NodePorts and the pods' ports on their nodes to an index of port holders (holders.ts).
//
// Enqueued precisely: a Service event its own key and those of ours sharing a protocol/port with it (the port
// conflicts); a Node change that alters eligibility, addresses or labels every Service of ours; an EndpointSlice change
// its Service when that is ours and Local; a change of the ports a Service's NodePorts or a pod hold those of ours on
// such a port (a refusal may begin, or lift when the holder goes). A Node turning Ready=Unknown goes through the
// guard of outage.ts first: while held it is planned as if Ready. Only the leader writes, through the LoadBalancer
// writer (loadbalancer/writer.ts): the finalizer first, then status.loadBalancer, each only when it differs, so that
// a restart or a resync writes nothing.
import type { LoadBalancerIngress, Node, Pod, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import type { Logger } from "../cli/log.ts";
import type { EventRecorder } from "../kube/events.ts";
import { type InformerHandlers, objectKey } from "../kube/informer.ts";
import type { Resource } from "../kube/resource.ts";
import type { CacheReader } from "../kube/sharedinformers.ts";
import { WorkQueue } from "../kube/workqueue.ts";
import { type EndpointSliceFacts, endpointSliceFacts, ReadyEndpoints } from "../loadbalancer/endpoints.ts";
import { type IpFamily, type LoadBalancerNode, loadBalancerNode, sameLoadBalancerNode } from "../loadbalancer/nodes.ts";
import { type ServiceWrite, ServiceWriter, type Warnings } from "../loadbalancer/writer.ts";
import type { BackoffOptions } from "../time/backoff.ts";
import {
  decide,
  type Intent,
  isPlanned,
  planIngress,
  planInputs,
  sameIngress,
  type ServiceConfig,
  type ServiceDecision,
  type ServiceFacts,
  serviceFacts,
} from "./decide.ts";
import { HolderIndex, holderId, podPorts, serviceNodePorts } from "./holders.ts";
import type { ServiceMetrics } from "./metrics.ts";
import { type ExternalFamilies, intentHolds, type NodeChange } from "./nodechange.ts";
import {
  asReady,
  decideUnknownGuard,
  HOLD_RULES,
  type HoldRule,
  holdReason,
  INITIAL_GUARD_STATE,
  type UnknownNode,
} from "./outage.ts";

export interface ServiceControllerOptions {
  config: ServiceConfig;
  services: CacheReader<Service>;
  nodes: CacheReader<Node>;
  endpointSlices: CacheReader<EndpointSlice>;
  /** The Service resource of a namespace (patches of the object and of its status). */
  serviceResource(namespace: string): Pick<Resource<Service>, "patch">;
  /** True while this replica may write (always, without leader election). */
  isLeader(): boolean;
  events: Pick<EventRecorder, "record">;
  log: Logger;
  metrics: ServiceMetrics;
  /** Services synced at once (default 4). */
  workers?: number;
  /** Retry delays of a Service whose write failed (default 1 s doubling to 5 min, as cloud-provider's). */
  retryBackoff?: BackoffOptions;
}

type Write = "finalizer-add" | "finalizer-remove" | "status";

type UnknownEntry = UnknownNode & { facts: LoadBalancerNode; ifReady: LoadBalancerNode };

export class ServiceController {
  private readonly options: Required<ServiceControllerOptions>;
  private readonly queue: WorkQueue;
  /** Each Node's facts as planned: a held Ready=Unknown node's as if Ready. */
  private readonly loadBalancerNodes = new Map<string, LoadBalancerNode>();
  /** The Nodes whose Ready is Unknown (outage.ts), with their facts as they are and as if Ready. */
  private readonly unknown = new Map<string, UnknownEntry>();
  private guardState = INITIAL_GUARD_STATE;
  /** The Unknown nodes held at the last decision, and why. */
  private heldUnknown = new Map<string, HoldRule>();
  /** The guard decides again when a grace ends. */
  private guardTimer: NodeJS.Timeout | undefined;
  /** Built when a sync needs it after a Node changed; the eligible nodes, and every Node's addresses. */
  private eligible: { nodes: LoadBalancerNode[]; addresses: Set<string> } | undefined;
  /** Eligible nodes with an ExternalIP, per family. */
  private readonly externalIPs: Record<IpFamily, number> = { IPv4: 0, IPv6: 0 };
  private readonly endpoints = new ReadyEndpoints();
  /** Every Service's NodePorts and the pods' ports on their nodes. */
  private readonly holderIndex = new HolderIndex();
  /** Each Service's planInputs() and, for ours, its facts (for the port-conflict enqueue). */
  private readonly inputs = new Map<string, string>();
  private readonly planned = new Map<string, ServiceFacts>();
  /** Built when a sync needs it; undefined once an input of it changed. */
  private plan: Map<string, Intent> | undefined;
  /** Each Service's intent before port conflicts (planIngress), kept until its inputs change. */
  private readonly alone = new Map<string, Intent>();
  /** UIDs of Services this process saw as ours (decide.ts: "held"). */
  private readonly held = new Set<string>();
  private readonly writer: ServiceWriter;
  /** Refusal, no nodes, family left out: told again only when it changes. */
  private readonly warnings: Warnings;
  /** When a change first queued each Service, for the latency metric. */
  private readonly queuedAt = new Map<string, number>();
  private started = false;
  private stopped = false;

  constructor(options: ServiceControllerOptions) {
    this.options = { workers: 4, retryBackoff: { baseMs: 1000, capMs: 300_000 }, ...options };
    const { serviceResource, isLeader, events, log, metrics } = this.options;
    this.writer = new ServiceWriter({ serviceResource, isLeader, events, log, writes: metrics.writes });
    this.warnings = this.writer.warnings();
    this.queue = new WorkQueue({
      workers: this.options.workers,
      backoff: this.options.retryBackoff,
      sync: (key) => this.sync(key),
      onError: (key, err, retryInMs) =>
        this.options.log.error("syncing Service failed", { service: key, err, retryInMs }),
    });
  }

  readonly serviceHandlers: InformerHandlers<Service> = {
    onAdd: (service) => this.serviceChanged(service),
    onUpdate: (_, service) => this.serviceChanged(service),
    onDelete: (service) => {
      this.holdersChanged(this.holderIndex.set(holderId("Service", service), NOTHING_HELD));
      this.serviceDeleted(serviceFacts(service));
    },
  };

  /** Pods as the watch trims them (watches.ts): only those that hold a port on their node. */
  readonly podHandlers: InformerHandlers<Pod> = {
    onAdd: (pod) => this.holdersChanged(this.holderIndex.set(holderId("Pod", pod), podPorts(pod))),
    onUpdate: (_, pod) => this.holdersChanged(this.holderIndex.set(holderId("Pod", pod), podPorts(pod))),
    onDelete: (pod) => this.holdersChanged(this.holderIndex.set(holderId("Pod", pod), NOTHING_HELD)),
  };

  readonly nodeHandlers: InformerHandlers<Node> = {
    onAdd: (node) => this.nodeChanged(node),
    onUpdate: (_, node) => this.nodeChanged(node),
    onDelete: (node) => {
      const before = this.loadBalancerNodes.get(node.metadata?.name ?? "");
      if (!before) return;
      this.loadBalancerNodes.delete(before.name);
      this.unknown.delete(before.name);
      this.nodesChanged({ before, after: undefined });
      this.guardUnknown();
    },
  };

  readonly endpointSliceHandlers: InformerHandlers<EndpointSlice> = {
    onAdd: (slice) => this.sliceChanged(endpointSliceFacts(slice)),
    onUpdate: (_, slice) => this.sliceChanged(endpointSliceFacts(slice)),
    onDelete: (slice) => this.sliceChanged(endpointSliceFacts(slice), true),
  };

  /** Syncs every cached Service (call once the caches have synced). */
  start(): void {
    this.started = true;
    this.adoptCarriers();
    this.resync();
  }

  /**
   * A controller that starts while Nodes are already Unknown (its pod moved during an outage) never saw them carry
   * traffic: the ingress its predecessor wrote says which did, and the guard takes those as carriers. It adds none.
   */
  private adoptCarriers(): void {
    const ingress = new Set([...this.planned.values()].flatMap(({ ingress }) => ingress.flatMap(({ ip }) => ip ?? [])));
    const ipsOf = ({ ips }: LoadBalancerNode) => Object.values(ips).flatMap((byType) => Object.values(byType));
    const adopted = [...this.unknown.values()].filter(
      (entry) => !entry.carried && ipsOf(entry.ifReady).some((ip) => ingress.has(ip)),
    );
    for (const entry of adopted) entry.carried = true;
    if (adopted.length) this.guardUnknown();
  }

  /** Syncs every cached Service again: at start, and when this replica starts leading. */
  resync(): void {
    for (const service of this.options.services.list()) this.enqueue(objectKey(service));
  }

  /** Stops syncing, and waits for the writes in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.guardTimer);
    await this.queue.stop();
  }

  /** Resolves once no Service is queued or being synced (for tests and benchmarks). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private serviceChanged(service: Service): void {
    this.holdersChanged(this.holderIndex.set(holderId("Service", service), serviceNodePorts(service)));
    const facts = serviceFacts(service);
    const inputs = planInputs(facts);
    const before = this.planned.get(facts.key);
    if (this.inputs.get(facts.key) !== inputs) {
      this.inputs.set(facts.key, inputs);
      if (isPlanned(facts, this.options.config)) this.planned.set(facts.key, facts);
      else this.planned.delete(facts.key);
      // Only a Service of ours, before or after, can change the plan.
      this.alone.delete(facts.key);
      if (before || this.planned.has(facts.key)) this.plan = undefined;
      this.enqueueSharingPorts(facts, before);
    }
    if (this.planned.has(facts.key)) this.held.add(facts.uid);
    this.enqueue(facts.key);
  }

  private serviceDeleted(facts: ServiceFacts): void {
    const before = this.planned.get(facts.key);
    this.inputs.delete(facts.key);
    this.planned.delete(facts.key);
    this.held.delete(facts.uid);
    this.writer.forget(facts.key);
    this.warnings.forget(facts.key);
    this.queuedAt.delete(facts.key);
    this.alone.delete(facts.key);
    if (!before) return;
    this.plan = undefined;
    this.enqueueSharingPorts(before, undefined);
  }

  /** Replans, and syncs ours on a port whose holders changed ("TCP/30080"). */
  private holdersChanged(ports: Set<string>): void {
    if (!ports.size) return;
    this.plan = undefined;
    for (const other of this.planned.values())
      if (other.ports.some((port) => ports.has(portKey(port)))) this.enqueue(other.key);
  }

  /** Ours that share a protocol/port with either version: a conflict between them may have begun or ended. */
  private enqueueSharingPorts(facts: ServiceFacts, before: ServiceFacts | undefined): void {
    const ports = new Set([...facts.ports, ...(before?.ports ?? [])].map(portKey));
    for (const other of this.planned.values())
      if (other.key !== facts.key && other.ports.some((port) => ports.has(portKey(port)))) this.enqueue(other.key);
  }

  private nodeAsPlanned(entry: Pick<UnknownEntry, "name" | "facts" | "ifReady">): LoadBalancerNode {
    return this.heldUnknown.has(entry.name) ? entry.ifReady : entry.facts;
  }

  /** Plans a Node's facts; replans when they differ from those it had. */
  private placeNode(before: LoadBalancerNode | undefined, after: LoadBalancerNode): void {
    this.loadBalancerNodes.set(after.name, after);
    if (!before || !sameLoadBalancerNode(before, after)) this.nodesChanged({ before, after });
  }

  private nodeChanged(node: Node): void {
    const { nodeSelector } = this.options.config;
    const facts = loadBalancerNode(node, nodeSelector);
    const { name } = facts;
    const before = this.loadBalancerNodes.get(name);
    const known = this.unknown.get(name);
    if (facts.ineligible?.rule === "ready-unknown")
      this.unknown.set(name, {
        name,
        sinceMs: known?.sinceMs ?? performance.now(),
        // Only a node that carried traffic right before may be held: never one first seen Unknown.
        carried: known ? known.carried : before !== undefined && !before.ineligible,
        facts,
        ifReady: loadBalancerNode(asReady(node), nodeSelector),
      });
    else this.unknown.delete(name);
    if (!before) this.loadBalancerNodes.set(name, facts); // counted among the Nodes by the guard
    this.guardUnknown({ before, facts });
  }

  /**
   * Decides the guard again (outage.ts), and plans the Unknown nodes whose hold changed and the node of `change`
   * (its facts before, as planned, and now): a held node as if Ready, any other as it is.
   */
  private guardUnknown(change?: { before: LoadBalancerNode | undefined; facts: LoadBalancerNode }): void {
    clearTimeout(this.guardTimer);
    const { log, metrics, config } = this.options;
    const nowMs = performance.now();
    const view = { nowMs, nodes: this.loadBalancerNodes.size, unknown: [...this.unknown.values()] };
    const decision = decideUnknownGuard(view, this.guardState, config.unknownGuard);
    if (decision.state.mass && !this.guardState.mass)
      log.warn("Ready=Unknown on many Nodes at once: they stay in the ingress", {
        rule: "mass-unknown",
        reason: decision.reason,
      });
    else if (!decision.state.mass && this.guardState.mass)
      log.info("mass Ready=Unknown over: a node still Unknown leaves after its grace", { reason: decision.reason });
    this.guardState = decision.state;
    const before = this.heldUnknown;
    this.heldUnknown = decision.held;
    for (const [node, rule] of decision.held)
      if (before.get(node) !== rule)
        log.v(1)?.("node kept in the ingress", { node, rule, reason: holdReason(rule, config.unknownGuard.graceMs) });
    for (const node of decision.dropped)
      log.info("node Ready=Unknown alone past its grace: it leaves the ingress", { node, rule: "ready-unknown" });
    const counts = [...decision.held.values()];
    for (const rule of HOLD_RULES)
      metrics.unknownNodesHeld.with({ rule }).set(counts.filter((each) => each === rule).length);
    // Only a change of hold changes the others' facts (each event of theirs places them): O(1) each at 5,000 nodes.
    for (const entry of this.unknown.values()) {
      entry.carried = decision.held.has(entry.name);
      if (entry.name !== change?.facts.name && before.has(entry.name) !== entry.carried)
        this.placeNode(this.loadBalancerNodes.get(entry.name), this.nodeAsPlanned(entry));
    }
    if (change) {
      const entry = this.unknown.get(change.facts.name);
      this.placeNode(change.before, entry ? this.nodeAsPlanned(entry) : change.facts);
    }
    if (decision.nextMs !== undefined && !this.stopped) {
      this.guardTimer = setTimeout(() => this.guardUnknown(), Math.max(1, Math.ceil(decision.nextMs - nowMs)));
      this.guardTimer.unref();
    }
  }

  /** Replans the Services whose intent the change may alter (nodechange.ts), and syncs all of ours. */
  private nodesChanged(change: NodeChange): void {
    this.eligible = undefined;
    const before = this.externalFamilies();
    this.countExternalIPs(change.before, -1);
    this.countExternalIPs(change.after, 1);
    const context = { maxNodes: this.options.config.maxNodes, external: { before, after: this.externalFamilies() } };
    for (const [key, intent] of this.alone) {
      const facts = this.planned.get(key);
      if (!facts || !intentHolds(facts, intent, change, context)) this.alone.delete(key);
    }
    this.plan = undefined;
    for (const key of this.planned.keys()) this.enqueue(key);
  }

  private countExternalIPs(node: LoadBalancerNode | undefined, sign: 1 | -1): void {
    if (!node || node.ineligible) return;
    for (const family of ["IPv4", "IPv6"] as const) if (node.ips[family].ExternalIP) this.externalIPs[family] += sign;
  }

  private externalFamilies(): ExternalFamilies {
    return { IPv4: this.externalIPs.IPv4 > 0, IPv6: this.externalIPs.IPv6 > 0 };
  }

  private sliceChanged(facts: EndpointSliceFacts, deleted = false): void {
    for (const service of this.endpoints.update(facts, deleted)) {
      const ours = this.planned.get(service);
      if (!ours?.local) continue;
      this.alone.delete(service);
      this.plan = undefined;
      this.enqueueSharingPorts(ours, undefined);
      this.enqueue(service);
    }
  }

  /** Events before start() are taken in by its resync. */
  private enqueue(key: string): void {
    if (!this.started || this.stopped) return;
    if (!this.queuedAt.has(key)) this.queuedAt.set(key, performance.now());
    this.queue.add(key);
  }

  private currentPlan(): { plan: Map<string, Intent>; addresses: Set<string> } {
    if (!this.eligible) {
      const nodes = [...this.loadBalancerNodes.values()].filter((node) => !node.ineligible);
      const addresses = new Set<string>();
      for (const node of this.loadBalancerNodes.values())
        for (const family of Object.values(node.ips)) for (const ip of Object.values(family)) addresses.add(ip);
      this.eligible = { nodes, addresses };
      this.options.metrics.eligibleNodes.set(nodes.length);
    }
    if (!this.plan) {
      const started = performance.now();
      this.plan = planIngress({
        services: this.planned.values(),
        nodes: this.eligible.nodes,
        readyNodes: (service) => this.endpoints.readyNodes(service),
        holders: this.holderIndex.holders,
        config: this.options.config,
      }, this.alone);
      this.options.metrics.planSeconds.observe((performance.now() - started) / 1000);
    }
    return { plan: this.plan, addresses: this.eligible.addresses };
  }

  /** Decides one Service and writes what differs; a failed write throws and the queue retries the key. */
  private async sync(key: string): Promise<void> {
    const { options } = this;
    // Followers keep their caches current, for a quick takeover (resync); nothing more.
    if (!options.isLeader()) return this.settled(key);
    const service = options.services.get(key);
    if (!service) return this.settled(key);
    const facts = serviceFacts(service);
    const resourceVersion = service.metadata?.resourceVersion;
    // Our own write reaches the cache a moment later: until then the cached copy is not written from again.
    if (this.writer.startedFrom(key, resourceVersion)) return;
    const { plan, addresses } = this.currentPlan();
    const decision = decide(facts, {
      config: options.config,
      intent: plan.get(key),
      held: this.held.has(facts.uid),
      isNodeAddress: (ip) => addresses.has(ip),
    });
    if (decision.action !== "ignore")
      options.metrics.syncs.with({ action: decision.action, rule: decision.rule }).inc();
    const writes = this.writesFor(facts, decision);
    this.warnings.tell(service, decision.rule, warningFor(decision));
    if (!writes.length) return this.settled(key);
    await this.write(service, facts, decision, writes);
  }

  private settled(key: string): void {
    this.queuedAt.delete(key);
  }

  /** The writes that bring the Service to the decision, in order: finalizer before status, status before release. */
  private writesFor(facts: ServiceFacts, decision: ServiceDecision): Write[] {
    switch (decision.action) {
      case "ignore":
        return [];
      case "release":
        return [
          ...(facts.ingress.length && !facts.deleting ? (["status"] as const) : []),
          ...(facts.finalizer ? (["finalizer-remove"] as const) : []),
        ];
      case "refuse":
        return facts.ingress.length ? ["status"] : [];
      case "ensure":
        return [
          ...(facts.finalizer ? [] : (["finalizer-add"] as const)),
          ...(sameIngress(facts.ingress, decision.ingress) ? [] : (["status"] as const)),
        ];
    }
  }

  private async write(
    service: Service,
    facts: ServiceFacts,
    decision: ServiceDecision,
    writes: Write[],
  ): Promise<void> {
    const { options, writer } = this;
    const log = options.log.with({ service: facts.key, rule: decision.rule });
    const ingress = decision.action === "ensure" ? decision.ingress : [];
    const releasing = decision.action === "release";
    const event = (reason: string, message: string) => writer.event(service, "Normal", reason, message);
    if (releasing) event("DeletingLoadBalancer", `Deleting load balancer: ${decision.reason}`);
    if (writes.includes("finalizer-add")) event("EnsuringLoadBalancer", "Ensuring load balancer");
    const serviceWrites = writes.map((name): ServiceWrite =>
      name === "status" ? { name, ingress } : { name, finalizer: name === "finalizer-add" },
    );
    if (!(await writer.write(service, serviceWrites))) return;
    if (releasing) {
      this.held.delete(facts.uid);
      event("DeletedLoadBalancer", "Deleted load balancer");
      log.info("released Service", { reason: decision.reason });
    } else if (writes.includes("status")) {
      // A refusal's cleared status is told by its Warning (warningFor()).
      const first = facts.ingress.length === 0;
      const [reason, verb] = first ? ["EnsuredLoadBalancer", "Ensured"] : ["UpdatedLoadBalancer", "Updated"];
      if (decision.action === "ensure") event(reason, `${verb} load balancer: ${decision.reason}`);
      log.info("wrote ingress", { ingress: ipList(ingress), reason: decision.reason });
      const since = this.queuedAt.get(facts.key);
      if (since !== undefined) options.metrics.ingressSeconds.observe((performance.now() - since) / 1000);
    }
    this.settled(facts.key);
  }
}

/**
 * The Event of a refusal, of no node, of ports a newer holder declares too (the Service keeps them: the older claim
 * wins, and the holder's owner may not see this Service), or of a family left out (cloud-provider's reasons where
 * it has one).
 */
function warningFor(decision: ServiceDecision): { reason: string; message: string } | undefined {
  if (decision.action === "refuse")
    return { reason: "SyncLoadBalancerFailed", message: `refused (${decision.rule}): ${decision.reason}` };
  if (decision.action !== "ensure") return undefined;
  if (decision.rule === "no-nodes")
    return {
      reason: "UnAvailableLoadBalancer",
      message: `There are no available nodes for LoadBalancer: ${decision.reason}`,
    };
  if (decision.newerHolders.length)
    return {
      reason: "PortAlsoHeldByNewer",
      message:
        `keeps its ports, the older claim: ${decision.newerHolders.join("; ")}; kube-proxy sends that port on ` +
        "this Service's node addresses to this Service",
    };
  if (decision.missingFamilies.length)
    return {
      reason: "IPFamilyWithoutAddresses",
      message: `left out ${decision.missingFamilies.join(", ")}: no chosen node has an address of that family`,
    };
  return undefined;
}

const ipList = (ingress: LoadBalancerIngress[]) => ingress.map(({ ip }) => ip).join(",");

const NOTHING_HELD = { node: undefined, claims: [] };

const portKey = ({ protocol, port }: { protocol: string; port: number }) => `${protocol}/${port}`;
