// The node-lifecycle-controller's loop, in the informer → work queue → sync shape (kube/workqueue.ts), keyed by
// node name. The informer's handlers queue a node when it changes in a way a decision can see; a full pass queues
// every cached node at start, every --reconcile-interval and on taking the lead. A sync decides one node from the
// cache (never a LIST), with the mass-deletion guard computed over all cached nodes once per burst of changes.
// A node whose answer only time can change is queued again then: at its NotReady timeout, or when the rate window
// frees a slot; a change of the guard's verdict queues every node. An expired node is probed in its sync (the
// queue's workers bound the probes in flight, and a node never has two), then fetched fresh, decided again with
// the probe's result, and deleted with preconditions on that fresh copy. A failed probe, GET or DELETE throws, and
// the queue retries the node with backoff. Only the leader probes and deletes.
import type { Node } from "kubernetes-types/core/v1.js";
import type { Logger } from "../cli/log.ts";
import { isApiError } from "../kube/errors.ts";
import { type EventRecorder, type EventType, nodeReference } from "../kube/events.ts";
import type { InformerHandlers } from "../kube/informer.ts";
import type { Resource } from "../kube/resource.ts";
import { WorkQueue } from "../kube/workqueue.ts";
import { uniqueIPs } from "../net/ip.ts";
import type { ProbeResult } from "../net/probe.ts";
import type { BackoffOptions } from "../time/backoff.ts";
import type { NodeLifecycleMetrics } from "./metrics.ts";
import { type SharedProviderID, sharedProviderIDs } from "./providerid.ts";
import {
  type ClusterHealth,
  clusterHealth,
  decide,
  isWatched,
  type LifecycleConfig,
  recentDeletions,
  type SkipClass,
} from "./decide.ts";

/** Address types worth probing: the node's own IPs (Hostname and DNS names would probe a resolver). */
const PROBED_ADDRESS_TYPES = new Set(["InternalIP", "ExternalIP"]);

/** InternalIP and ExternalIP addresses of the node, both families, without repeats. */
export function probeAddresses(node: Node): string[] {
  const addresses = (node.status?.addresses ?? []).filter((a) => PROBED_ADDRESS_TYPES.has(a.type));
  return uniqueIPs(addresses.map((a) => a.address));
}

/** Whether a decision could differ between two trimmed copies (resourceVersion alone decides nothing). */
export function decisionInputsChanged(before: Node, after: Node): boolean {
  const strip = (node: Node) => ({ ...node, metadata: { ...node.metadata, resourceVersion: undefined } });
  return JSON.stringify(strip(before)) !== JSON.stringify(strip(after));
}

/** The shared node cache satisfies this: all nodes, trimmed to the fields definition.ts declares. */
export interface NodeCache {
  get(name: string): Node | undefined;
  list(): Node[];
}

export interface ControllerOptions {
  config: LifecycleConfig;
  /**
   * Every node is synced again this often: expired nodes that answered are probed again, and time-bound
   * answers are checked even if the wall clock stepped since their timer was set.
   */
  reconcileIntervalMs: number;
  dryRun: boolean;
  cache: NodeCache;
  /** Fresh GETs and the DELETE. */
  nodes: Pick<Resource<Node>, "get" | "delete">;
  probe(addresses: string[], signal: AbortSignal): Promise<ProbeResult>;
  /** True while this replica may probe and delete (always, without leader election). */
  isLeader(): boolean;
  events: Pick<EventRecorder, "record">;
  log: Logger;
  metrics: NodeLifecycleMetrics;
  /** Nodes synced, hence probed, at once (default 10); a node never has two probes in flight. */
  maxConcurrentProbes?: number;
  /** Retry delays of a node whose probe, fresh GET or DELETE failed (default 1 s doubling to 60 s). */
  retryBackoff?: BackoffOptions;
  now?: () => Date;
}

/** What a node was last evented for: a skip class, or an outcome of the check itself. */
type Stage = SkipClass | "changed" | "would-delete";

/**
 * Skips evented on the node: the ones an operator waits on, and a protected node that would otherwise be
 * deleted (NotReady past the timeout), so that whoever protected it sees it respected. Earlier rules are the
 * normal state.
 */
const EVENTED_SKIPS = new Set<SkipClass>(["protected", "paused", "rate-limited"]);

export class Controller {
  private readonly options: Required<Omit<ControllerOptions, "now">> & { now: () => Date };
  private readonly abort = new AbortController();
  private readonly queue: WorkQueue;
  /** The guard's verdict over all cached nodes; undefined once a node changed (computed again by the next sync). */
  private health: ClusterHealth | undefined;
  /** When this controller deleted nodes, for the per-minute limit. */
  private deletionTimes: Date[] = [];
  /**
   * The uid of each node this controller deleted, by name, until the cache shows it gone: our own DELETE
   * reaches the cache a moment later, and until then the cached copy is not probed again.
   */
  private readonly deleted = new Map<string, string | undefined>();
  /** The stage last evented per node name (and the uid it was for), so a node is evented when its stage changes. */
  private readonly evented = new Map<string, { uid: string | undefined; stage: Stage }>();
  /** "uid providerID" of the Nodes reported for sharing a providerID, so each is reported once while it lasts. */
  private sharedReported = new Set<string>();
  private paused: boolean | undefined;
  private icmpUnavailableLogged = false;
  private interval: NodeJS.Timeout | undefined;

  constructor(options: ControllerOptions) {
    this.options = {
      maxConcurrentProbes: 10,
      retryBackoff: { baseMs: 1000, capMs: 60_000 },
      now: () => new Date(),
      ...options,
    };
    this.queue = new WorkQueue({
      workers: this.options.maxConcurrentProbes,
      backoff: this.options.retryBackoff,
      sync: (name) => this.sync(name),
      onError: (name, err, retryInMs) => this.options.log.error("checking node failed", { node: name, err, retryInMs }),
    });
  }

  /** Informer handlers: a node added, deleted, or changed where a decision can see it, is queued. */
  readonly handlers: InformerHandlers<Node> = {
    onAdd: (node) => this.changed(node),
    onUpdate: (before, after) => {
      if (decisionInputsChanged(before, after)) this.changed(after);
    },
    onDelete: (node) => this.changed(node),
  };

  /** A pass now and then every reconcile interval (call once the cache has synced; changes before are ignored). */
  start(): void {
    if (this.interval || this.abort.signal.aborted) return;
    this.interval = setInterval(() => this.trigger(), this.options.reconcileIntervalMs);
    this.trigger();
  }

  /**
   * A pass: every cached node is queued, and the guard's verdict computed afresh (e.g. on taking the lead).
   * Not before start(): the guard must never be computed over a cache still filling.
   */
  trigger(): void {
    if (!this.interval || this.abort.signal.aborted) return;
    this.health = undefined;
    this.options.metrics.reconciles.inc();
    this.queueAll();
  }

  /** Stops passes, aborts probes, and waits for syncs in flight (a DELETE already sent completes). */
  async stop(): Promise<void> {
    clearInterval(this.interval);
    this.abort.abort();
    await this.queue.stop();
  }

  /** Resolves once no node is queued or being synced (nodes queued for later do not count). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private changed(node: Node): void {
    if (!this.interval) return; // start()'s pass takes in the initial list
    this.health = undefined; // any node counts in the guard (and in the providerIDs reported)
    this.queue.add(nameOf(node));
  }

  private queueAll(): void {
    for (const node of this.options.cache.list()) this.queue.add(nameOf(node));
  }

  /** Decides one node from the cache; an expired one is probed and checked (check), which may throw. */
  private async sync(name: string): Promise<void> {
    const { config, metrics, cache } = this.options;
    const leader = this.options.isLeader();
    const health = (this.health ??= this.clusterChanged(cache.list(), leader));
    const node = cache.get(name);
    if (!node || !isWatched(node, config)) {
      this.evented.delete(name); // gone or unwatched: when it is back, its news is news again
      this.deleted.delete(name);
      return;
    }
    if (this.deleted.has(name) && this.deleted.get(name) === node.metadata?.uid) return;
    // Followers keep the cache and the gauges current, for a quick takeover; nothing more (their Events
    // would repeat the leader's).
    if (!leader) return;
    const now = this.options.now();
    const decision = decide(node, now, config, { health, deletionTimes: this.recentDeletions(now) });
    if (decision.action === "probe") return this.check(node);
    if (decision.action !== "skip") return;
    metrics.skipped.with({ class: decision.class }).inc();
    if (EVENTED_SKIPS.has(decision.class)) this.skipped(node, decision.class, decision.reason);
    else this.evented.delete(name); // back to normal: its next skip or deletion is news again
    this.recheckAt(name, decision.until, now);
  }

  /** Queues the node again when its decision may change by time alone (a millisecond past, so it has passed). */
  private recheckAt(name: string, until: Date | undefined, now: Date): void {
    if (until) this.queue.addAfter(name, until.getTime() - now.getTime() + 1);
  }

  /**
   * After a change: the guard's verdict and the providerIDs shared, over every cached node. A new verdict
   * queues every node, since each one's decision may follow it.
   */
  private clusterChanged(nodes: Node[], leader: boolean): ClusterHealth {
    const { metrics, config, log } = this.options;
    const health = clusterHealth(nodes, config.unhealthyThreshold);
    metrics.paused.set(health.paused ? 1 : 0);
    if (health.paused !== this.paused) {
      if (health.paused) log.warn("mass-deletion guard", { state: health.reason });
      else if (this.paused !== undefined) log.info("mass-deletion guard", { state: health.reason });
      if (this.paused !== undefined) this.queueAll();
      this.paused = health.paused;
    }
    const shared = sharedProviderIDs(nodes);
    metrics.sharedProviderID.set(shared.reduce((sum, group) => sum + group.nodes.length, 0));
    if (leader) this.reportShared(shared);
    return health;
  }

  /** A Warning Event on each Node sharing a providerID and a log line per value, once while it is shared. */
  private reportShared(shared: SharedProviderID[]): void {
    const current = new Set<string>();
    for (const { providerID, nodes, reason } of shared) {
      const fresh = nodes.filter((node) => {
        const key = `${node.metadata?.uid}\u0000${providerID}`;
        current.add(key);
        return !this.sharedReported.has(key);
      });
      if (fresh.length === 0) continue;
      const names = nodes.map((node) => node.metadata?.name).join(",");
      this.options.log.warn("nodes share a providerID", { providerID, nodes: names });
      for (const node of fresh) this.options.events.record(nodeReference(node), "Warning", "DuplicateProviderID", reason);
    }
    this.sharedReported = current;
  }

  /** Forgets deletions older than the rate window; returns the others. */
  private recentDeletions(now: Date): Date[] {
    this.deletionTimes = recentDeletions(this.deletionTimes, now);
    return this.deletionTimes;
  }

  /** Probe, then a fresh GET decided again with the probe's result, then DELETE on that fresh copy. */
  private async check(cached: Node): Promise<void> {
    const { options } = this;
    const name = nameOf(cached);
    const log = options.log.with({ node: name });
    const addresses = probeAddresses(cached);
    log.v(2)?.("probing", { addresses: addresses.join(",") });
    const probe = await options.probe(addresses, this.abort.signal);
    if (this.abort.signal.aborted) return;
    options.metrics.probes.with({ result: probeResultLabel(probe) }).inc();
    if (probe.icmpUnavailable && !this.icmpUnavailableLogged) {
      this.icmpUnavailableLogged = true;
      log.warn("ICMP probes unavailable (needs CAP_NET_RAW or net.ipv4.ping_group_range): relying on TCP");
    }
    if (!options.isLeader()) return;

    let fresh: Node;
    try {
      fresh = await options.nodes.get(name, { signal: this.abort.signal });
    } catch (err) {
      if (this.abort.signal.aborted) return; // stopping: nothing failed
      if (!isApiError(err, "NotFound")) throw err;
      log.v(2)?.("node is gone");
      return;
    }
    if (fresh.metadata?.uid !== cached.metadata?.uid || probeAddresses(fresh).join() !== addresses.join()) {
      // The probe was about another object or other addresses: its informer event queues it afresh.
      options.metrics.skipped.with({ class: "changed" }).inc();
      this.skipped(fresh, "changed", "changed while it was probed (uid or addresses)");
      return;
    }
    const now = options.now();
    const decision = decide(fresh, now, options.config, {
      health: clusterHealth(options.cache.list(), options.config.unhealthyThreshold),
      deletionTimes: this.recentDeletions(now),
      probe,
    });
    if (decision.action === "skip") {
      options.metrics.skipped.with({ class: decision.class }).inc();
      this.skipped(fresh, decision.class, decision.reason);
      this.recheckAt(name, decision.until, now);
    } else if (decision.action === "delete" && options.dryRun) {
      options.metrics.deletions.with({ result: "dry-run" }).inc();
      const message = `would delete (dry run): ${decision.reason}`;
      if (this.eventOnce(fresh, "would-delete", "Normal", "WouldDeleteNode", message))
        log.info("would delete node (dry run)", { reason: decision.reason });
    } else if (decision.action === "delete") {
      await this.delete(fresh, decision.reason, now, log);
    }
  }

  private async delete(node: Node, reason: string, now: Date, log: Logger): Promise<void> {
    const { options } = this;
    // Leadership can lapse during the probe and the GET: the last check is right before the call.
    if (!options.isLeader()) {
      log.v(2)?.("not deleting node: no longer the leader");
      return;
    }
    const { name = "", uid, resourceVersion } = node.metadata ?? {};
    // Reserved before the call, so that concurrent checks see it in the rate limit.
    this.deletionTimes.push(now);
    const unreserve = () => {
      this.deletionTimes = this.deletionTimes.filter((time) => time !== now);
    };
    try {
      await options.nodes.delete(name, { preconditions: { uid, resourceVersion } });
    } catch (err) {
      if (isApiError(err, "Conflict")) {
        unreserve();
        options.metrics.deletions.with({ result: "changed" }).inc();
        this.skipped(node, "changed", "changed since it was checked (uid and resourceVersion preconditions)");
        return;
      }
      if (isApiError(err, "NotFound")) {
        unreserve();
        options.metrics.deletions.with({ result: "gone" }).inc();
        log.v(2)?.("node is gone");
        return;
      }
      // Refused by the apiserver (a 4xx: RBAC, an admission policy, throttling): nothing was deleted. Otherwise
      // (a timeout, a 5xx) it is unknown whether it was, and the reservation stays, to be safe.
      if (isApiError(err) && err.code < 500) unreserve();
      options.metrics.deletions.with({ result: "error" }).inc();
      options.events.record(nodeReference(node), "Warning", "DeletionFailed", (err as Error).message);
      throw new Error("deleting failed", { cause: err }); // the queue tries the node again, with backoff
    }
    this.deleted.set(name, uid);
    options.metrics.deletions.with({ result: "deleted" }).inc();
    log.info("deleted node", { reason });
    options.events.record(nodeReference(node), "Normal", "DeletingNode", `Deleting node: ${reason}`);
  }

  /** Logs a skip after the probe stage (or by the guard or rate limit), and events it once per stage. */
  private skipped(node: Node, stage: Stage, reason: string): void {
    const log = this.options.log.with({ node: node.metadata?.name });
    const [type, eventReason]: [EventType, string] =
      stage === "paused" ? ["Warning", "DeletionsPaused"] : ["Normal", "DeletionSkipped"];
    if (this.eventOnce(node, stage, type, eventReason, reason)) log.info("not deleting node", { reason });
    else log.v(2)?.("not deleting node", { reason });
  }

  /** Records the event unless this node's last event was for the same stage; true when recorded. */
  private eventOnce(node: Node, stage: Stage, type: EventType, reason: string, message: string): boolean {
    const { uid } = node.metadata ?? {};
    const last = this.evented.get(nameOf(node));
    if (last?.uid === uid && last?.stage === stage) return false;
    this.evented.set(nameOf(node), { uid, stage });
    this.options.events.record(nodeReference(node), type, reason, message);
    return true;
  }
}

const nameOf = (node: Node) => node.metadata?.name ?? "";

function probeResultLabel(probe: ProbeResult): string {
  if (probe.inconclusive) return "inconclusive";
  return probe.alive ? "alive" : "unreachable";
}
