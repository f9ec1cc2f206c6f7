// The node-lifecycle-controller's reconcile loop. It works from the informer's cache of all nodes
// (never a LIST): every --reconcile-interval, and shortly after a node changes in a way a decision
// can see, it decides for each watched node. Expired nodes are probed (a bounded number at once,
// one probe per node); a node no probe reached is fetched fresh, decided again with the probe's
// result, and deleted with preconditions on that fresh copy. Only the leader probes and deletes.
import type { Node } from "kubernetes-types/core/v1.js";
import type { Logger } from "../cli/log.ts";
import { isApiError } from "../kube/errors.ts";
import { type EventRecorder, type EventType, nodeReference } from "../kube/events.ts";
import type { InformerHandlers } from "../kube/informer.ts";
import type { Resource } from "../kube/resource.ts";
import { uniqueIPs } from "../net/ip.ts";
import type { ProbeResult } from "../net/probe.ts";
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
  list(): Node[];
}

export interface ControllerOptions {
  config: LifecycleConfig;
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
  /** Nodes probed at once (default 10); a node never has two probes in flight. */
  maxConcurrentProbes?: number;
  /** After a node change, the pass it triggers waits this long to take in further changes (default 1 s). */
  debounceMs?: number;
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
  private readonly queued = new Map<string, Node>();
  private readonly checking = new Map<string, Promise<void>>();
  /** When this controller deleted nodes, for the per-minute limit. */
  private deletionTimes: Date[] = [];
  /** The stage last evented per node uid, so a node is evented when its stage changes, not every pass. */
  private readonly evented = new Map<string, Stage>();
  /** "uid providerID" of the Nodes reported for sharing a providerID, so each is reported once while it lasts. */
  private sharedReported = new Set<string>();
  private paused: boolean | undefined;
  private icmpUnavailableLogged = false;
  private interval: NodeJS.Timeout | undefined;
  private debounce: NodeJS.Timeout | undefined;

  constructor(options: ControllerOptions) {
    this.options = { maxConcurrentProbes: 10, debounceMs: 1000, now: () => new Date(), ...options };
  }

  /** Informer handlers: a node added, deleted, or changed where a decision can see it, triggers a pass. */
  readonly handlers: InformerHandlers<Node> = {
    onAdd: () => this.trigger(),
    onUpdate: (before, after) => {
      if (decisionInputsChanged(before, after)) this.trigger();
    },
    onDelete: () => this.trigger(),
  };

  /** Runs a pass now and then every reconcile interval (call once the cache has synced). */
  start(): void {
    if (this.interval || this.abort.signal.aborted) return;
    this.interval = setInterval(() => this.reconcile(), this.options.reconcileIntervalMs);
    this.reconcile();
  }

  /** A pass after the debounce delay; further triggers until then join it. */
  trigger(): void {
    if (this.debounce || !this.interval || this.abort.signal.aborted) return;
    this.debounce = setTimeout(() => {
      this.debounce = undefined;
      this.reconcile();
    }, this.options.debounceMs);
  }

  /** Stops passes, aborts probes, and waits for checks in flight (a DELETE already sent completes). */
  async stop(): Promise<void> {
    clearInterval(this.interval);
    clearTimeout(this.debounce);
    this.abort.abort();
    this.queued.clear();
    await this.idle();
  }

  /** Resolves once no check is queued or running. */
  async idle(): Promise<void> {
    while (this.checking.size > 0) await Promise.all(this.checking.values());
  }

  /** One pass over the cache: health, then a decision for each watched node; expired ones are queued. */
  reconcile(): void {
    if (this.abort.signal.aborted) return;
    const { config, metrics } = this.options;
    const now = this.options.now();
    const nodes = this.options.cache.list();
    const health = this.updateHealth(nodes);
    const shared = sharedProviderIDs(nodes);
    metrics.sharedProviderID.set(shared.reduce((sum, group) => sum + group.nodes.length, 0));
    metrics.reconciles.inc();
    // Followers keep the cache and the gauges current, for a quick takeover; nothing more (their Events
    // would repeat the leader's).
    if (!this.options.isLeader()) return;
    this.reportShared(shared);
    const deletionTimes = this.recentDeletions(now);
    const current = new Set<string>();
    for (const node of nodes) {
      if (!isWatched(node, config)) continue;
      const uid = node.metadata?.uid ?? "";
      current.add(uid);
      const decision = decide(node, now, config, { health, deletionTimes });
      if (decision.action === "probe") {
        this.enqueue(node);
      } else if (decision.action === "skip") {
        metrics.skipped.with({ class: decision.class }).inc();
        if (EVENTED_SKIPS.has(decision.class)) this.skipped(node, decision.class, decision.reason);
        else this.evented.delete(uid); // back to normal: its next skip or deletion is news again
      }
    }
    for (const uid of this.evented.keys()) if (!current.has(uid)) this.evented.delete(uid);
    this.options.log.v(4)?.("reconciled", {
      nodes: nodes.length,
      queued: this.queued.size,
      probing: this.checking.size,
    });
  }

  private updateHealth(nodes: Node[]): ClusterHealth {
    const health = clusterHealth(nodes, this.options.config.unhealthyThreshold);
    this.options.metrics.paused.set(health.paused ? 1 : 0);
    if (health.paused !== this.paused) {
      const { log } = this.options;
      if (health.paused) log.warn("mass-deletion guard", { state: health.reason });
      else if (this.paused !== undefined) log.info("mass-deletion guard", { state: health.reason });
      this.paused = health.paused;
    }
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

  private enqueue(node: Node): void {
    const name = node.metadata?.name ?? "";
    if (this.checking.has(name)) return;
    this.queued.set(name, node);
    this.pump();
  }

  /** Starts queued checks while fewer than maxConcurrentProbes run. */
  private pump(): void {
    for (const [name, node] of this.queued) {
      if (this.checking.size >= this.options.maxConcurrentProbes || this.abort.signal.aborted) return;
      this.queued.delete(name);
      const check = this.check(node)
        .catch((err: unknown) => this.options.log.error("checking node failed", { node: name, err }))
        .finally(() => {
          this.checking.delete(name);
          this.pump();
        });
      this.checking.set(name, check);
    }
  }

  /** Probe, then a fresh GET decided again with the probe's result, then DELETE on that fresh copy. */
  private async check(cached: Node): Promise<void> {
    const { options } = this;
    const name = cached.metadata?.name ?? "";
    const log = options.log.with({ node: name });
    if (!options.isLeader()) return;
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
      if (!isApiError(err, "NotFound")) throw err;
      log.v(2)?.("node is gone");
      return;
    }
    if (fresh.metadata?.uid !== cached.metadata?.uid || probeAddresses(fresh).join() !== addresses.join()) {
      // The probe was about another object or other addresses: the next pass starts over with it.
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
      // Unknown whether it was deleted (e.g. a timeout): the reservation stays, to be safe.
      options.metrics.deletions.with({ result: "error" }).inc();
      log.error("deleting node failed", { err });
      options.events.record(nodeReference(node), "Warning", "DeletionFailed", (err as Error).message);
      return;
    }
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
    const uid = node.metadata?.uid ?? "";
    if (this.evented.get(uid) === stage) return false;
    this.evented.set(uid, stage);
    this.options.events.record(nodeReference(node), type, reason, message);
    return true;
  }
}

function probeResultLabel(probe: ProbeResult): string {
  if (probe.inconclusive) return "inconclusive";
  return probe.alive ? "alive" : "unreachable";
}
