// The bgppeer-status controller: writes each BGPPeer's status (status.ts) from the agents' per-node reports
// (sessions.ts). Informers on BGPPeers and Nodes, trimmed to what the status reads, feed a keyed work queue of peer
// names (kube/workqueue.ts). A peer is synced when it changes, and every peer a second after a Node's labels, Ready
// condition or report change, once however many Nodes changed meanwhile; other Node updates (heartbeats, addresses,
// images) enqueue nothing. A sync reads every cached Node (for 5,000 Nodes some 5-20 ms, each report parsed once
// per version of its Node) and writes the status subresource only when it differs.
// Only the leader writes; a refused report is logged and told to its Node as an Event once per reason.
import type { Node } from "kubernetes-types/core/v1.js";
import type { Logger } from "../cli/log.ts";
import { isApiError } from "../kube/errors.ts";
import { type EventRecorder, nodeReference } from "../kube/events.ts";
import type { InformerHandlers } from "../kube/informer.ts";
import type { Resource } from "../kube/resource.ts";
import type { CacheReader } from "../kube/sharedinformers.ts";
import { WorkQueue } from "../kube/workqueue.ts";
import type { PeerStatusMetrics } from "./metrics.ts";
import type { BGPPeer } from "./peer.ts";
import { SESSION_STATES, SESSIONS_ANNOTATION } from "./sessions.ts";
import { decidePeerStatus, type NodeSessionFacts, nodeSessionFacts, sameStatus, type SessionRule } from "./status.ts";

/** How long Node changes are gathered before the peers are synced (a status shown by kubectl, not acted on). */
const NODE_BATCH_MS = 1000;

const RULES: readonly SessionRule[] = [...SESSION_STATES, "not-ready", "no-report", "report-refused"];
const REFUSAL_RULES = ["report-too-long", "report-malformed", "report-unknown-state"] as const;

export interface PeerStatusControllerOptions {
  peers: CacheReader<BGPPeer>;
  nodes: CacheReader<Node>;
  /** The status subresource's patch. */
  peerResource: Pick<Resource<BGPPeer>, "patch">;
  isLeader(): boolean;
  events: Pick<EventRecorder, "record">;
  log: Logger;
  metrics: PeerStatusMetrics;
}

export class PeerStatusController {
  private readonly options: PeerStatusControllerOptions;
  private readonly queue: WorkQueue;
  /** Each cached Node version's facts: the informer replaces the object on every change. */
  private readonly facts = new WeakMap<Node, NodeSessionFacts>();
  /** Each synced peer's sessions by rule, for the sessions gauge. */
  private readonly counts = new Map<string, Map<SessionRule, number>>();
  /** The refusal last told of each node whose report is refused. */
  private readonly told = new Map<string, string>();
  private started = false;

  constructor(options: PeerStatusControllerOptions) {
    this.options = options;
    this.queue = new WorkQueue({
      sync: (name) => this.sync(name),
      onError: (name, err, retryInMs) =>
        options.log.error("writing BGPPeer status failed", { peer: name, err, retryInMs }),
    });
  }

  readonly peerHandlers: InformerHandlers<BGPPeer> = {
    onAdd: (peer) => this.enqueue(nameOf(peer)),
    onUpdate: (_, peer) => this.enqueue(nameOf(peer)),
    onDelete: (peer) => this.enqueue(nameOf(peer)),
  };

  readonly nodeHandlers: InformerHandlers<Node> = {
    onAdd: () => this.nodesChanged(),
    onUpdate: (before, after) => {
      if (sessionView(before) !== sessionView(after)) this.nodesChanged();
    },
    onDelete: () => this.nodesChanged(),
  };

  start(): void {
    this.started = true;
    this.resync();
  }

  /** Every peer synced again: at start, and when this replica starts leading. */
  resync(): void {
    for (const peer of this.options.peers.list()) this.enqueue(nameOf(peer));
  }

  async stop(): Promise<void> {
    await this.queue.stop();
  }

  /**
   * Every peer may select the Node: each is synced within NODE_BATCH_MS, once for all the Node changes meanwhile, so
   * that Nodes that keep changing cost each peer a sync a second at most.
   */
  private nodesChanged(): void {
    if (!this.started) return;
    for (const peer of this.options.peers.list()) this.queue.addAfter(nameOf(peer), NODE_BATCH_MS);
  }

  /** Events before start() are taken in by its resync. */
  private enqueue(name: string): void {
    if (this.started) this.queue.add(name);
  }

  private async sync(name: string): Promise<void> {
    const { options } = this;
    // Followers keep the caches current, for a quick takeover (resync); nothing more.
    if (!options.isLeader()) return;
    const peer = options.peers.get(name);
    if (!peer) {
      this.counts.delete(name);
      return this.updateSessions();
    }
    const nodes = options.nodes.list().map((node) => this.factsOf(node));
    this.tellRefusals(nodes);
    const { status, sessions } = decidePeerStatus(peer, nodes);
    const counts = new Map<SessionRule, number>();
    for (const { rule } of sessions) counts.set(rule, (counts.get(rule) ?? 0) + 1);
    this.counts.set(name, counts);
    this.updateSessions();
    if (sameStatus(peer.status, status)) return;
    // Leadership can lapse while the sync ran: the last check is right before the write.
    if (!options.isLeader()) return;
    try {
      await options.peerResource.patch(name, "merge", { status }, { subresource: "status" });
    } catch (err) {
      const gone = isApiError(err, "NotFound");
      options.metrics.writes.with({ result: gone ? "gone" : "error" }).inc();
      if (gone) return;
      throw new Error(`BGPPeer status: ${(err as Error).message}`, { cause: err });
    }
    options.metrics.writes.with({ result: "ok" }).inc();
    options.log.v(2)?.("wrote BGPPeer status", {
      peer: name,
      nodes: status.nodes,
      established: status.established,
    });
  }

  private factsOf(node: Node): NodeSessionFacts {
    let facts = this.facts.get(node);
    if (!facts) {
      facts = nodeSessionFacts(node);
      this.facts.set(node, facts);
    }
    return facts;
  }

  /** A refused report is told once per reason: a log line, an Event on its Node, the gauge by rule. */
  private tellRefusals(nodes: readonly NodeSessionFacts[]): void {
    const { options } = this;
    const refused = new Map<string, { rule: string; reason: string }>();
    for (const { name, report } of nodes) if (report && "rule" in report) refused.set(name, report);
    for (const name of this.told.keys()) if (!refused.has(name)) this.told.delete(name);
    for (const [name, { rule, reason }] of refused) {
      const message = `${SESSIONS_ANNOTATION} refused (${rule}): ${reason}`;
      if (this.told.get(name) === message) continue;
      this.told.set(name, message);
      options.log.warn("BGP session report refused", { node: name, rule, reason });
      const node = options.nodes.get(name);
      if (node) options.events.record(nodeReference(node), "Warning", "BGPSessionReportRefused", message);
    }
    for (const rule of REFUSAL_RULES)
      options.metrics.refusedReports.with({ rule }).set([...refused.values()].filter((r) => r.rule === rule).length);
  }

  private updateSessions(): void {
    for (const rule of RULES) {
      let total = 0;
      for (const counts of this.counts.values()) total += counts.get(rule) ?? 0;
      this.options.metrics.sessions.with({ state: rule }).set(total);
    }
  }
}

/** What the status reads of a Node: a change elsewhere (a heartbeat, an address) enqueues nothing. */
function sessionView(node: Node): string {
  const { metadata, status } = node;
  const ready = status?.conditions?.find(({ type }) => type === "Ready")?.status;
  return JSON.stringify([metadata?.labels ?? {}, ready, metadata?.annotations?.[SESSIONS_ANNOTATION]]);
}

const nameOf = (obj: { metadata?: { name?: string } }) => obj.metadata?.name ?? "";
