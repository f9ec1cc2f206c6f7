// The address pool controller: Services, LoadBalancerIPPools and Nodes from informers → keyed work queue
// (kube/workqueue.ts, per-key backoff) → sync one Service or one pool. allocate() (allocate.ts) runs over every
// Service of ours at once, only once every informer has synced (start()), and again after each burst of changes;
// the Services whose allocation changed, and every pool, are queued. It never hands out what the network uses
// (exclusions.ts: from the announcer Leases, ServiceCIDRs, Nodes and the API server's EndpointSlices).
//
// A pool carries POOL_FINALIZER from its first sync: deleted, it stays (Ready False, reason Deleting, in its status)
// until no Service holds an address of it, for the Services keep their addresses whatever becomes of the pool.
//
// A Service's allocation is recorded before it is announced: first the finalizer and the allocated-from annotation
// (one write), then status.loadBalancer.ingress (ipMode VIP), through the LoadBalancer writer (loadbalancer/
// writer.ts: each write pinned to the version it was decided from, the Events in one place). The addresses
// this process decides are held for allocate() from the decision until the cache shows them, so an allocation made
// in between never sees them free. Only the leader writes, and only what differs.
//
// Once a Service's status shows its addresses, assignAnnouncers() (announcers.ts) picks the node that announces
// them from the announcer Leases (leases.ts), the Nodes and, for Local, the EndpointSlices; the announcer
// annotation and label are written (by the same writer) after the status, and removed
// before anything else when the Service loses its addresses or its announcer; a removal from a node whose Lease is
// live names that node (RELEASED_FROM_ANNOTATION), and the next announcer waits for its acknowledgement. Liveness
// changes with time alone: the queue runs the assignment again (addAfter) when the first live Lease would expire;
// an acknowledgement runs it when the Lease that carries it is seen.
//
// An address another host answers for, as its announcer's Lease reports it (inuse.ts), gets a Warning on its
// Service (AddressInUseOnNetwork, told once per change) and a line in its pool's status; it is not moved.
import { setTimeout as delay } from "node:timers/promises";
import type { Lease } from "kubernetes-types/coordination/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import type { Logger } from "../cli/log.ts";
import { isApiError } from "../kube/errors.ts";
import type { EventRecorder } from "../kube/events.ts";
import { type InformerHandlers, objectKey } from "../kube/informer.ts";
import type { Resource } from "../kube/resource.ts";
import type { CacheReader } from "../kube/sharedinformers.ts";
import { WorkQueue } from "../kube/workqueue.ts";
import { endpointSliceFacts, ReadyEndpoints, SERVICE_NAME_LABEL } from "../loadbalancer/endpoints.ts";
import { type LoadBalancerNode, loadBalancerNode, sameLoadBalancerNode } from "../loadbalancer/nodes.ts";
import { type ServiceWrite, ServiceWriter, type Warnings } from "../loadbalancer/writer.ts";
import type { BackoffOptions } from "../time/backoff.ts";
import { Pacer } from "../time/pacer.ts";
import {
  ALLOCATED_FROM_ANNOTATION,
  type AllocateResult,
  allocate,
  type Allocation,
  announcing,
  isOurs,
  type L2ServiceFacts,
  l2ServiceFacts,
} from "./allocate.ts";
import {
  ANNOUNCER_ANNOTATION,
  ANNOUNCER_LABEL,
  announcerLabelValue,
  GATEWAYS_ANNOTATION,
  leaseNode,
  RELEASED_FROM_ANNOTATION,
  SEGMENTS_ANNOTATION,
} from "./announcement.ts";
import {
  type AnnouncedService,
  type Announcer,
  type AnnouncerDecision,
  type AnnouncersResult,
  announcedFacts,
  announcerOf,
  assignAnnouncers,
  Picks,
} from "./announcers.ts";
import type { PoolsConfig } from "./flags.ts";
import { ExclusionSet, exclusions } from "./exclusions.ts";
import { addressesInUse, type InUse, inUseWarning } from "./inuse.ts";
import { AnnouncerLeases, GUARD_RULES, type GuardRule, type LeaseGuard, provenSegments } from "./leases.ts";
import type { PoolsMetrics } from "./metrics.ts";
import { type LoadBalancerIPPool, POOL_FINALIZER, type PoolFacts, type PoolStatus, poolFacts } from "./pool.ts";
import { poolStatus, sameStatus } from "./status.ts";
import type { ServiceCIDR } from "./watches.ts";

export interface PoolControllerOptions {
  config: PoolsConfig;
  services: CacheReader<Service>;
  nodes: CacheReader<Node>;
  pools: CacheReader<LoadBalancerIPPool>;
  /** The announcer Leases (announcement.ts) in their namespace. */
  leases: CacheReader<Lease>;
  endpointSlices: CacheReader<EndpointSlice>;
  serviceCidrs: CacheReader<ServiceCIDR>;
  /** The Service resource of a namespace (patches of the object and of its status). */
  serviceResource(namespace: string): Pick<Resource<Service>, "patch">;
  poolResource: Pick<Resource<LoadBalancerIPPool>, "patch">;
  /** True while this replica may write (always, without leader election). */
  isLeader(): boolean;
  events: Pick<EventRecorder, "record">;
  log: Logger;
  metrics: PoolsMetrics;
  /** Keys synced at once (default 4). */
  workers?: number;
  /** Retry delays of a key whose write failed (default 1 s doubling to 5 min). */
  retryBackoff?: BackoffOptions;
  /** A monotonic clock in ms (default performance.now): Leases are timed by it. */
  now?: () => number;
}

/** What a Service should be brought to. */
type Decision =
  | Allocation
  | { action: "release"; rule: "deleted" | "not-ours"; reason: string; moved: undefined }
  | { action: "ignore" };

type Write = "record" | "status" | "announcer" | "release";

/** What a Service holds once this process's writes to it are done. */
interface Hold {
  uid: string;
  ingress: string[];
  allocatedFrom: string | undefined;
}

type WrittenState = Pick<L2ServiceFacts, "ingress" | "allocatedFrom" | "finalizer">;

/** Queue keys: one per Service, one per pool, one that only reallocates, one that only reassigns announcers. */
const SERVICE = "service:";
const POOL = "pool:";
const ALLOCATION = "allocation";
/** See time/pacer.ts: a change after a quiet spell is allocated at once. */
const ALLOCATE_INTERVAL_MS = 100;
const ANNOUNCEMENT = "announcement";

export class PoolController {
  private readonly options: Required<PoolControllerOptions>;
  private readonly queue: WorkQueue;
  private result: AllocateResult | undefined;
  /** Each Service's allocation in `result`, as text: compared with the next one's to queue what changed. */
  private allocationTexts = new Map<string, string>();
  private pools: PoolFacts[] = [];
  private exclusions = new ExclusionSet([]);
  private stale = true;
  /** The allocation reads every Service: while they keep changing it runs at most every ALLOCATE_INTERVAL_MS. */
  private readonly pacer = new Pacer(ALLOCATE_INTERVAL_MS);
  /** What allocate() reads of each Service of ours, to tell when it must run again. */
  private readonly inputs = new Map<string, string>();
  /** What assignAnnouncers() reads of each Service beside its allocation, likewise. */
  private readonly announceInputs = new Map<string, string>();
  /** What Services hold by this process's decisions, for allocate(), until their cached copies show it. */
  private readonly holds = new Map<string, Hold>();
  /** Each announcer Lease's segments and gateways as last seen: a change of them is one of the exclusions. */
  private readonly leaseNetwork = new Map<string, string>();
  private readonly writer: ServiceWriter;
  /** Allocation warnings: told again only when they change. */
  private readonly warnings: Warnings;
  private readonly leases = new AnnouncerLeases();
  private guardRule: GuardRule | undefined;
  /** Per node, the Lease segments last refused (as text), to tell a refusal once. */
  private readonly refusedSegments = new Map<string, string>();
  private readonly loadBalancerNodes = new Map<string, LoadBalancerNode>();
  private readonly endpoints = new ReadyEndpoints();
  private announcement: AnnouncersResult | undefined;
  private readonly picks = new Picks();
  private announceStale = true;
  /** The version of each Service at which this process removed a live announcer (the removal's own). */
  private readonly releaseVersions = new Map<string, string>();
  /** Nodes whose acknowledgement a Service waits for: a change of what their Lease says they applied replans. */
  private awaitingAck = new Set<string>();
  private readonly announcerWarnings: Warnings;
  /** Per Service, its addresses another host answers for (inuse.ts), as of the last announcement plan. */
  private inUse = new Map<string, InUse[]>();
  /** The reports last ignored (as text), to tell them once. */
  private ignoredInUse = "";
  private readonly inUseWarnings: Warnings;
  private started = false;
  private stopped = false;

  constructor(options: PoolControllerOptions) {
    this.options = {
      workers: 4,
      retryBackoff: { baseMs: 1000, capMs: 300_000 },
      now: () => performance.now(),
      ...options,
    };
    const { serviceResource, isLeader, events, log, metrics } = this.options;
    this.writer = new ServiceWriter({ serviceResource, isLeader, events, log, writes: metrics.writes });
    this.warnings = this.writer.warnings();
    this.announcerWarnings = this.writer.warnings();
    this.inUseWarnings = this.writer.warnings();
    this.queue = new WorkQueue({
      workers: this.options.workers,
      backoff: this.options.retryBackoff,
      sync: (key) => this.sync(key),
      onError: (key, err, retryInMs) => this.options.log.error("syncing failed", { key, err, retryInMs }),
    });
  }

  readonly serviceHandlers: InformerHandlers<Service> = {
    onAdd: (service) => this.serviceChanged(service),
    onUpdate: (_, service) => this.serviceChanged(service),
    onDelete: (service) => {
      const key = objectKey(service);
      for (const map of [this.inputs, this.announceInputs, this.holds, this.releaseVersions]) map.delete(key);
      for (const told of [this.writer, this.warnings, this.announcerWarnings, this.inUseWarnings]) told.forget(key);
      this.changed(ALLOCATION);
    },
  };

  readonly poolHandlers: InformerHandlers<LoadBalancerIPPool> = {
    onAdd: (pool) => this.changed(POOL + objectKey(pool)),
    onUpdate: (_, pool) => this.changed(POOL + objectKey(pool)),
    onDelete: (pool) => {
      this.forgetPool(objectKey(pool));
      this.changed(ALLOCATION);
    },
  };

  readonly serviceCidrHandlers: InformerHandlers<ServiceCIDR> = {
    onAdd: () => this.changed(ALLOCATION),
    onUpdate: () => this.changed(ALLOCATION),
    onDelete: () => this.changed(ALLOCATION),
  };

  readonly nodeHandlers: InformerHandlers<Node> = {
    onAdd: (node) => {
      this.nodeChanged(node);
      this.changed(ALLOCATION);
    },
    onUpdate: (before, after) => {
      this.nodeChanged(after);
      const excluded = (node: Node) => JSON.stringify([node.status?.addresses, node.spec?.podCIDRs]);
      if (excluded(before) !== excluded(after)) this.changed(ALLOCATION);
    },
    onDelete: (node) => {
      this.loadBalancerNodes.delete(node.metadata?.name ?? "");
      this.announcementChanged();
      this.changed(ALLOCATION);
    },
  };

  readonly leaseHandlers: InformerHandlers<Lease> = {
    onAdd: (lease) => this.leaseChanged(lease),
    onUpdate: (_, lease) => this.leaseChanged(lease),
    onDelete: (lease) => {
      this.leases.gone(lease);
      this.leaseNetwork.delete(lease.metadata?.name ?? "");
      this.announcementChanged();
      this.changed(ALLOCATION);
    },
  };

  readonly endpointSliceHandlers: InformerHandlers<EndpointSlice> = {
    onAdd: (slice) => this.sliceChanged(slice, false),
    onUpdate: (_, slice) => this.sliceChanged(slice, false),
    onDelete: (slice) => this.sliceChanged(slice, true),
  };

  /** Allocates, and syncs every Service and pool (call once every cache has synced). */
  start(): void {
    this.started = true;
    this.resync();
  }

  /**
   * Syncs everything cached again: at start, and when this replica starts leading. A release by the replica that
   * led before is on the Service itself (RELEASED_FROM_ANNOTATION): waited for from its cached version.
   */
  resync(): void {
    this.stale = true;
    this.announceStale = true;
    for (const service of this.options.services.list()) this.enqueue(SERVICE + objectKey(service));
    for (const pool of this.options.pools.list()) this.enqueue(POOL + objectKey(pool));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.queue.stop();
  }

  /** Resolves once nothing is queued or being synced (for tests). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /**
   * Reallocates only when what allocate() reads of a Service of ours (before or after) changed, and reassigns
   * announcers only when what assignAnnouncers() reads did. This process's own writes change neither: allocate()
   * reads a Service as held from the decision on, and the announcer written is the one assigned. With 2,000
   * Services, each write running both again took most of a CPU.
   */
  private serviceChanged(service: Service): void {
    const facts = l2ServiceFacts(service);
    const key = facts.key;
    const inputs = isOurs(facts, this.options.config) ? this.allocationInputs(facts) : undefined;
    if (inputs !== this.inputs.get(key)) {
      this.stale = true;
      if (inputs === undefined) this.inputs.delete(key);
      else this.inputs.set(key, inputs);
    }
    const announced = announcementInputs(facts, announcedFacts(service));
    if (announced !== this.announceInputs.get(key)) {
      this.announceStale = true;
      this.announceInputs.set(key, announced);
    }
    this.enqueue(SERVICE + key);
  }

  /** What allocate() reads of a Service (allocationFacts() less the finalizer, which it does not read). */
  private allocationInputs(facts: L2ServiceFacts): string {
    const hold = this.holds.get(facts.key);
    const read = hold?.uid === facts.uid ? { ...facts, ingress: hold.ingress, allocatedFrom: hold.allocatedFrom } : facts;
    return JSON.stringify({ ...read, finalizer: undefined });
  }

  private changed(key: string): void {
    this.stale = true;
    this.enqueue(key);
  }

  private announcementChanged(): void {
    this.announceStale = true;
    this.enqueue(ANNOUNCEMENT);
  }

  private nodeChanged(node: Node): void {
    const facts = loadBalancerNode(node, undefined);
    const before = this.loadBalancerNodes.get(facts.name);
    if (!before || !sameLoadBalancerNode(before, facts)) this.announcementChanged();
    this.loadBalancerNodes.set(facts.name, facts);
  }

  private leaseChanged(lease: Lease): void {
    const name = lease.metadata?.name ?? "";
    const node = leaseNode(name);
    const applied = node === undefined ? undefined : this.leases.applied(node);
    const conflictsBefore = node === undefined ? undefined : this.leases.conflicts(node)?.conflictsText;
    const changed = this.leases.seen(lease, this.options.now());
    const acknowledged = node !== undefined && this.awaitingAck.has(node) && this.leases.applied(node) !== applied;
    const conflicts = node === undefined ? undefined : this.leases.conflicts(node);
    const reported = conflicts !== undefined && conflicts.conflictsText !== conflictsBefore;
    if (reported && conflicts.conflictsRefused)
      this.options.log.warn("announcer Lease conflicts refused: not as the agent writes them", {
        node,
        rule: conflicts.conflictsRefused.rule,
        reason: conflicts.conflictsRefused.reason,
      });
    if (changed || acknowledged || reported) this.announcementChanged();
    const { [SEGMENTS_ANNOTATION]: segments, [GATEWAYS_ANNOTATION]: gateways } = lease.metadata?.annotations ?? {};
    const network = JSON.stringify([segments, gateways]);
    if (this.leaseNetwork.get(name) === network) return;
    this.leaseNetwork.set(name, network);
    this.changed(ALLOCATION);
  }

  private sliceChanged(slice: EndpointSlice, deleted: boolean): void {
    if (this.endpoints.update(endpointSliceFacts(slice), deleted).length) this.announcementChanged();
    if (isApiServerSlice(slice)) this.changed(ALLOCATION);
  }

  /** Events before start() are taken in by its resync. */
  private enqueue(key: string): void {
    if (this.started && !this.stopped) this.queue.add(key);
  }

  /**
   * A Service as allocate() reads it: what this process decided it holds, until its cached copy shows it. An
   * allocation made while the writes are unanswered, or before the watch delivers them, sees the address taken; a
   * write that failed may have happened, and its address stays taken until a later decision or the cache says.
   */
  private allocationFacts(service: Service): L2ServiceFacts {
    const facts = l2ServiceFacts(service);
    const hold = this.holds.get(facts.key);
    if (!hold) return facts;
    const shown = facts.ingress.join() === hold.ingress.join() && facts.allocatedFrom === hold.allocatedFrom;
    if (hold.uid === facts.uid && !shown) return { ...facts, ingress: hold.ingress, allocatedFrom: hold.allocatedFrom };
    this.holds.delete(facts.key);
    return facts;
  }

  /** The allocation of every Service, made again after any change; what it changes is queued. */
  private allocation(): AllocateResult {
    if (this.result && !this.stale) return this.result;
    this.stale = false;
    const started = performance.now();
    const { services, nodes, pools, serviceCidrs, endpointSlices } = this.options;
    this.pools = pools.list().map(poolFacts);
    this.exclusions = new ExclusionSet(
      exclusions({
        announcers: this.leases.network(),
        serviceCidrs: serviceCidrs.list().map(({ metadata, spec }) => ({
          name: metadata?.name ?? "",
          cidrs: spec?.cidrs ?? [],
        })),
        nodes: nodes.list().map(({ metadata, spec, status }) => ({
          name: metadata?.name ?? "",
          podCidrs: spec?.podCIDRs ?? [],
          addresses: (status?.addresses ?? []).map(({ address }) => address),
        })),
        apiServers: endpointSlices
          .list()
          .filter(isApiServerSlice)
          .flatMap(({ endpoints = [] }) => endpoints.flatMap(({ addresses }) => addresses)),
      }),
    );
    const next = this.pacer.run(() =>
      allocate({
        services: services.list().map((service) => this.allocationFacts(service)),
        pools: this.pools,
        exclusions: this.exclusions,
        served: this.options.config,
      }),
    );
    this.options.metrics.allocateSeconds.observe((performance.now() - started) / 1000);
    const first = this.result === undefined;
    const before = this.allocationTexts;
    this.result = next;
    this.allocationTexts = new Map([...next.services].map(([key, allocation]) => [key, JSON.stringify(allocation)]));
    this.announceStale = true;
    if (first) return next;
    for (const key of new Set([...before.keys(), ...this.allocationTexts.keys()]))
      if (before.get(key) !== this.allocationTexts.get(key)) this.enqueue(SERVICE + key);
    // Pools' statuses are cheap to compare, and depend on Nodes and other pools too: each is synced.
    for (const pool of this.pools) this.enqueue(POOL + pool.name);
    return next;
  }

  /**
   * The announcer of every allocated Service whose status shows its addresses, assigned again after any change
   * and when a Lease expires or a grace ends (wakeAt); the Services whose decision changed are queued.
   */
  private announcements(result: AllocateResult): AnnouncersResult {
    if (this.announcement && !this.announceStale) return this.announcement;
    this.announceStale = false;
    const nowMs = this.options.now();
    const guard = this.leases.guard(nowMs);
    const observed = this.leases.announcers(nowMs);
    const announcers = this.proven(observed.announcers);
    const { nextExpiryMs } = observed;
    this.options.metrics.liveAnnouncers.set(announcers.filter(({ live }) => live).length);
    this.reportGuard(guard);
    const services: AnnouncedService[] = [];
    const awaiting = new Set<string>();
    for (const service of this.options.services.list()) {
      const facts = l2ServiceFacts(service);
      const allocation = result.services.get(facts.key);
      if (allocation?.action !== "allocate" || facts.deleting || facts.ingress.join() !== allocation.ips.join())
        continue;
      if (announcing(facts, this.options.config) === "every-node") continue; // BGP: no announcer to assign
      const { local, announcer, nodeSelector, releasedFrom } = announcedFacts(service);
      // The removal's own version when this process wrote it; else the cached one, which is no earlier.
      const releaseVersion = this.releaseVersions.get(facts.key) ?? service.metadata?.resourceVersion;
      const { key, ips } = { key: facts.key, ips: allocation.ips };
      services.push({ key, ips, local, announcer, nodeSelector, releasedFrom, releaseVersion });
      // Only a release waits for an acknowledgement: other applied versions moving (each bookmark) plan nothing.
      if (announcer === undefined && releasedFrom !== undefined) awaiting.add(releasedFrom);
    }
    this.awaitingAck = awaiting;
    this.planInUse(services);
    const next = assignAnnouncers({
      services,
      announcers,
      ineligible: (node) => {
        const facts = this.loadBalancerNodes.get(node);
        return facts ? facts.ineligible : { rule: "no-node", reason: "has no Node" };
      },
      nodeLabels: (node) => this.loadBalancerNodes.get(node)?.labels ?? {},
      readyNodes: (service) => this.endpoints.readyNodes(service),
      picks: this.picks,
      ...(guard.paused ? { paused: guard } : {}),
    });
    const before = this.announcement?.decisions;
    this.announcement = next;
    for (const [key, decision] of next.decisions)
      if (JSON.stringify(before?.get(key)) !== JSON.stringify(decision)) {
        this.options.metrics.announcers.with({ action: decision.action, rule: decision.rule }).inc();
        this.enqueue(SERVICE + key);
      }
    for (const key of before?.keys() ?? []) if (!next.decisions.has(key)) this.enqueue(SERVICE + key);
    this.wakeAt(Math.min(next.wakeAtMs ?? Infinity, nextExpiryMs ?? Infinity));
    return next;
  }

  /** Who holds the addresses the Leases report in use by another host; a change queues the Services and pools. */
  private planInUse(services: readonly AnnouncedService[]): void {
    const { byService, ignored } = addressesInUse({ services, reports: this.leases.reportedConflicts() });
    const text = JSON.stringify(ignored);
    if (text !== this.ignoredInUse)
      for (const { node, address, mac, rule, reason } of ignored)
        this.options.log.warn("announcer Lease conflict not taken", { node, address, mac, rule, reason });
    this.ignoredInUse = text;
    const before = this.inUse;
    this.inUse = byService;
    let changed = false;
    for (const key of new Set([...before.keys(), ...byService.keys()]))
      if (JSON.stringify(before.get(key)) !== JSON.stringify(byService.get(key))) {
        changed = true;
        this.enqueue(SERVICE + key);
      }
    if (changed) for (const pool of this.pools) this.enqueue(POOL + pool.name);
  }

  /** The announcers with only the segments their Nodes' addresses prove (leases.ts); a refusal is told once. */
  private proven(announcers: Announcer[]): Announcer[] {
    const byNode = new Map(
      this.options.nodes
        .list()
        .map(({ metadata, status }) => [metadata?.name ?? "", (status?.addresses ?? []).map(({ address }) => address)]),
    );
    const told = new Map(this.refusedSegments);
    this.refusedSegments.clear();
    let refusedCount = 0;
    const result = announcers.map((announcer) => {
      const { proven, refused } = provenSegments(announcer.segments, byNode.get(announcer.name) ?? []);
      refusedCount += refused.length;
      const text = refused.map(({ address, prefixLength }) => `${address}/${prefixLength}`).join(",");
      if (text !== "" && text !== told.get(announcer.name))
        this.options.log.warn("announcer Lease segments refused: the node's Node has no address in them", {
          node: announcer.name,
          segments: text,
          rule: "segment-unproven",
        });
      if (text !== "") this.refusedSegments.set(announcer.name, text);
      return refused.length ? { ...announcer, segments: proven } : announcer;
    });
    this.options.metrics.refusedSegments.set(refusedCount);
    return result;
  }

  /** Logs a change of the Lease guard's rule once, and sets its gauge. */
  private reportGuard(guard: LeaseGuard): void {
    if (guard.rule !== this.guardRule) {
      const fields = { rule: guard.rule, reason: guard.reason };
      if (guard.paused) this.options.log.warn("announcer Lease guard: expiries are not acted on", fields);
      else if (this.guardRule !== undefined)
        this.options.log.info("announcer Lease guard lifted: every Lease counts from now", { rule: guard.rule });
    }
    this.guardRule = guard.rule;
    for (const rule of GUARD_RULES) this.options.metrics.leaseGuard.with({ rule }).set(rule === guard.rule ? 1 : 0);
  }

  /** Assigns the announcers again at `atMs` (monotonic ms), when a Lease may expire or a grace ends. */
  private wakeAt(atMs: number): void {
    // A millisecond late, so that the time it wakes at is past the expiry it waits for.
    if (atMs !== Infinity) this.queue.addAfter(ANNOUNCEMENT, Math.max(0, atMs - this.options.now()) + 1);
  }

  private async sync(key: string): Promise<void> {
    // An allocation due waits for its pace: the changes that come meanwhile are taken in by the same pass.
    for (let wait = this.pacer.wait(); this.stale && wait > 0; wait = this.pacer.wait()) await delay(wait);
    if (!this.options.isLeader()) return;
    // Queued by a change, or by wakeAt(): time alone changes which Leases are live.
    if (key === ANNOUNCEMENT) this.announceStale = true;
    const result = this.allocation();
    const announcement = this.announcements(result);
    if (key.startsWith(SERVICE)) return this.syncService(key.slice(SERVICE.length), result, announcement);
    if (key.startsWith(POOL)) return this.syncPool(key.slice(POOL.length), result);
  }

  private async syncService(key: string, result: AllocateResult, announcement: AnnouncersResult): Promise<void> {
    const service = this.options.services.get(key);
    if (!service) return;
    const resourceVersion = service.metadata?.resourceVersion;
    if (this.writer.startedFrom(key, resourceVersion)) return;
    const facts = l2ServiceFacts(service);
    const decision = this.decide(facts, result.services.get(key));
    const announced = decision.action === "allocate" ? announcement.decisions.get(key) : undefined;
    const announcer = announced && announcerOf(announced);
    const before = announcedFacts(service);
    const differs = before.announcer !== announcer || before.label !== labelOf(announcer);
    // A removal from a node whose Lease is live names it: its agent announces until it sees the removal, and the
    // next announcer waits for it to say so (announcers.ts). Any other announcer write clears it.
    const liveBefore = before.announcer !== undefined && this.leases.isLive(before.announcer, this.options.now());
    const releasedFrom = announcer === undefined && liveBefore ? (before.announcer as string) : null;
    // An announcer goes before anything else changes, and comes after the status shows the addresses.
    const writes: Write[] = [
      ...(differs && announcer === undefined ? (["announcer"] as const) : []),
      ...(decision.action === "ignore" ? [] : writesFor(facts, decision)),
      ...(differs && announcer !== undefined ? (["announcer"] as const) : []),
    ];
    if (decision.action !== "ignore") {
      this.options.metrics.syncs.with({ action: decision.action, rule: decision.rule }).inc();
      this.warn(service, decision);
    }
    this.warnAnnouncer(service, announced);
    this.inUseWarnings.tell(service, "reported-by-announcer", inUseWarning(this.inUse.get(key) ?? []));
    if (!writes.length) return void this.holds.delete(key); // the cached copy shows the decision
    const rule = decision.action === "ignore" ? "not-ours" : decision.rule;
    const reason = decision.action === "ignore" ? "the Service is not ours" : decision.reason;
    const log = this.options.log.with({ service: key, rule });
    // Held from the decision on, before the first write is answered.
    const { ingress, allocatedFrom, finalizer } = facts;
    const done = writes.reduce((state, write) => after(state, write, decision), { ingress, allocatedFrom, finalizer });
    this.holds.set(key, { uid: facts.uid, ingress: done.ingress, allocatedFrom: done.allocatedFrom });
    if (this.inputs.has(key)) this.inputs.set(key, this.allocationInputs(facts));
    const allocation = decision.action === "allocate" ? decision : undefined;
    const serviceWrites = writes.map((write) => serviceWrite(write, allocation, announcer, releasedFrom));
    const complete = await this.writer.write(service, serviceWrites, (write, index, version) => {
      // The watch shows the announcer written with the status of that moment: an announcer goes first or last.
      if (write.name !== "announcer") return;
      const shown = { ingress: index === 0 ? facts.ingress : done.ingress, deleting: facts.deleting };
      const written = { ...before, announcer, label: labelOf(announcer), releasedFrom: releasedFrom ?? undefined };
      this.announceInputs.set(key, announcementInputs(shown, written));
      // The version the released node must have applied: this removal's own.
      if (releasedFrom === null || version === undefined) this.releaseVersions.delete(key);
      else this.releaseVersions.set(key, version);
    });
    if (!complete) return;
    if (decision.action === "allocate" && writes.includes("status")) {
      log.info("wrote ingress", { ingress: decision.ips.join(","), reason: decision.reason });
      const event = facts.ingress.length ? "UpdatedLoadBalancer" : "EnsuredLoadBalancer";
      this.writer.event(service, "Normal", event, `Allocated ${decision.reason}`);
    }
    if (writes.includes("announcer")) {
      const fields = { announcer: announcer ?? "none", before: before.announcer ?? "none" };
      // The announcer's own rule (sticky, failover, released, …), not the allocation's.
      const announcerLog = announced ? log.with({ rule: announced.rule }) : log;
      announcerLog.info("wrote announcer", { ...fields, reason: announced?.reason ?? reason });
      // Once per change, as MetalLB's nodeAssigned: the annotation read back is what was told before, so a resync,
      // a restart or a new leader that finds the same node writes nothing and tells nothing.
      if (announced && announcer !== undefined && announcer !== before.announcer) {
        const was = before.announcer ?? before.releasedFrom;
        const message = `announced from node ${announcer}${was === undefined ? "" : `, was ${was}`} (${announced.rule}): ${announced.reason}`;
        this.writer.event(service, "Normal", "AnnouncerAssigned", message);
      }
    }
    if (decision.action === "release") log.info("released Service", { reason: decision.reason });
  }

  private decide(facts: L2ServiceFacts, allocation: Allocation | undefined): Decision {
    const ours = isOurs(facts, this.options.config);
    // Released only when surely ours: the allocated-from annotation is this controller's signature, and the
    // finalizer is shared with every controller built on k8s.io/cloud-provider.
    if (facts.deleting && ours) return release("deleted", "the Service is being deleted");
    if (!ours && facts.allocatedFrom !== undefined)
      return release("not-ours", facts.deleting ? "the Service is being deleted" : "the Service is no longer ours");
    return allocation ?? { action: "ignore" };
  }

  /**
   * A pool's finalizer (added first; removed once it is being deleted and no Service holds an address of it, which
   * is the last write: the pool then goes), then its status.
   */
  private async syncPool(name: string, result: AllocateResult): Promise<void> {
    const pool = this.options.pools.get(name);
    const facts = this.pools.find((each) => each.name === name);
    if (!pool || !facts) return this.forgetPool(name);
    const used = result.used.get(name) ?? new Set<string>();
    const log = this.options.log.with({ pool: name });
    if (facts.deleting && facts.finalizer && used.size === 0) {
      if (await this.writePoolFinalizer(pool, false)) log.info("pool released: no Service holds an address of it");
      return;
    }
    if (!facts.deleting && !facts.finalizer && !(await this.writePoolFinalizer(pool, true))) return;
    const current = pool.status?.conditions?.find(({ type }) => type === "Ready");
    const retained = result.retained.get(name) ?? [];
    const { pools, exclusions } = this;
    const inUse = [...this.inUse.values()].flat().filter(({ address }) => used.has(address));
    const status = poolStatus({ pool: facts, pools, used, retained, exclusions, inUse, current, now: new Date() });
    const { poolSize, poolUsed, poolFree } = this.options.metrics;
    for (const [gauge, value] of [
      [poolSize, status.size],
      [poolUsed, status.used],
      [poolFree, status.free],
    ] as const)
      gauge.with({ pool: name }).set(Number(value));
    if (sameStatus(pool.status, status)) return;
    return this.writePoolStatus(name, status);
  }

  /** A pool gone: its gauges are no longer exposed. */
  private forgetPool(name: string): void {
    const { poolSize, poolUsed, poolFree } = this.options.metrics;
    for (const gauge of [poolSize, poolUsed, poolFree]) gauge.remove({ pool: name });
  }

  /** Adds or removes POOL_FINALIZER, pinned to the version read; false when not written (changed, gone). */
  private async writePoolFinalizer(pool: LoadBalancerIPPool, add: boolean): Promise<boolean> {
    const write = "pool-finalizer";
    const { name = "", resourceVersion, finalizers = [] } = pool.metadata ?? {};
    const others = finalizers.filter((finalizer) => finalizer !== POOL_FINALIZER);
    try {
      // Pinned: a finalizer list changed by someone else meanwhile is never overwritten (the change queues it again).
      const patch = { metadata: { resourceVersion, finalizers: add ? [...others, POOL_FINALIZER] : others } };
      await this.options.poolResource.patch(name, "merge", patch);
      this.options.metrics.writes.with({ write, result: "ok" }).inc();
      return true;
    } catch (err) {
      const result = isApiError(err, "Conflict") ? "conflict" : isApiError(err, "NotFound") ? "gone" : "error";
      this.options.metrics.writes.with({ write, result }).inc();
      if (result === "error") throw new Error(`${write} failed: ${(err as Error).message}`, { cause: err });
      return false;
    }
  }

  private async writePoolStatus(name: string, status: PoolStatus): Promise<void> {
    try {
      await this.options.poolResource.patch(name, "merge", { status }, { subresource: "status" });
      this.options.metrics.writes.with({ write: "pool-status", result: "ok" }).inc();
    } catch (err) {
      const gone = isApiError(err, "NotFound");
      this.options.metrics.writes.with({ write: "pool-status", result: gone ? "gone" : "error" }).inc();
      if (!gone) throw new Error(`pool-status failed: ${(err as Error).message}`, { cause: err });
    }
  }

  private warn(service: Service, decision: Decision): void {
    const notices = decision.action === "allocate" ? decision.notices : [];
    const noticed = notices.map(({ rule, reason }) => `(${rule}) ${reason}`).join("; ");
    const warning =
      decision.action === "refuse"
        ? { reason: "AllocationFailed", message: `refused (${decision.rule}): ${decision.reason}` }
        : decision.action === "allocate" && decision.moved
          ? {
              reason: "AddressMoved",
              message: `moved to ${decision.ips.join(", ")}: ${decision.moved}${noticed && `; ${noticed}`}`,
            }
          : decision.action === "allocate" && noticed
            ? { reason: "AddressKept", message: `keeps ${decision.ips.join(", ") || "nothing"}: ${noticed}` }
            : undefined;
    if (this.warnings.tell(service, decision.action, warning))
      for (const { rule } of notices) this.options.metrics.notices.with({ rule }).inc();
  }

  private warnAnnouncer(service: Service, decision: AnnouncerDecision | undefined): void {
    const warning =
      decision?.action === "refuse"
        ? { reason: "NoAnnouncer", message: `refused (${decision.rule}): ${decision.reason}` }
        : undefined;
    this.announcerWarnings.tell(service, decision?.rule, warning);
  }

}

const release = (rule: "deleted" | "not-ours", reason: string): Decision => ({
  action: "release",
  rule,
  reason,
  moved: undefined,
});

/** What assignAnnouncers() reads of a Service beside its allocation, as text to compare. */
const announcementInputs = (
  { ingress, deleting }: Pick<L2ServiceFacts, "ingress" | "deleting">,
  announced: ReturnType<typeof announcedFacts>,
) => JSON.stringify([ingress, deleting, announced]);

const labelOf = (announcer: string | undefined) =>
  announcer === undefined ? undefined : announcerLabelValue(announcer);

/** A write of writesFor() as the writer takes it. */
function serviceWrite(
  write: Write,
  allocation: (Allocation & { action: "allocate" }) | undefined,
  announcer: string | undefined,
  releasedFrom: string | null,
): ServiceWrite {
  switch (write) {
    case "status":
      return { name: write, ingress: (allocation?.ips ?? []).map((ip) => ({ ip, ipMode: "VIP" })) };
    case "announcer":
      return {
        name: write,
        annotations: { [ANNOUNCER_ANNOTATION]: announcer ?? null, [RELEASED_FROM_ANNOTATION]: releasedFrom },
        labels: { [ANNOUNCER_LABEL]: labelOf(announcer) ?? null },
      };
    case "record": {
      const annotations = { [ALLOCATED_FROM_ANNOTATION]: allocation?.pools.join(",") ?? null };
      return { name: write, finalizer: true, annotations };
    }
    case "release":
      return { name: write, finalizer: false, annotations: { [ALLOCATED_FROM_ANNOTATION]: null } };
  }
}

/** A Service's state after one write. */
function after(state: WrittenState, write: Write, decision: Decision): WrittenState {
  const allocation = decision.action === "allocate" ? decision : undefined;
  if (write === "announcer") return state;
  if (write === "status") return { ...state, ingress: allocation?.ips ?? [] };
  if (write === "record") return { ...state, finalizer: true, allocatedFrom: allocation?.pools.join(",") };
  return { ...state, finalizer: false, allocatedFrom: undefined };
}

/** The writes that bring a Service to the decision, in order: the record before the status it explains. */
function writesFor(facts: L2ServiceFacts, decision: Decision): Write[] {
  switch (decision.action) {
    case "ignore":
      return [];
    case "release":
      return [
        ...(facts.ingress.length && !facts.deleting ? (["status"] as const) : []),
        ...(facts.finalizer || facts.allocatedFrom !== undefined ? (["release"] as const) : []),
      ];
    case "refuse":
      return facts.ingress.length ? ["status"] : [];
    case "allocate": {
      const recorded = facts.finalizer && facts.allocatedFrom === decision.pools.join(",");
      return [
        ...(recorded ? [] : (["record"] as const)),
        ...(facts.ingress.join() === decision.ips.join() ? [] : (["status"] as const)),
      ];
    }
  }
}

/** A slice of default/kubernetes: the API server's endpoints. */
const isApiServerSlice = ({ metadata }: EndpointSlice) =>
  metadata?.namespace === "default" && metadata.labels?.[SERVICE_NAME_LABEL] === "kubernetes";
