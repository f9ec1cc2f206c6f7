// The kubelet-serving CSR approver's loop. It works from these caches: an informer on the CSRs of the
// kubelet-serving signer only (a field selector: other signers' CSRs never reach this process), the program's
// one node informer, which feeds an index of every Node's names and IPs (nodes.ts), and three small informers on
// the cluster's own addresses (cluster.ts). A CSR is decided when it appears or changes, and a CSR that waits
// for its Node (rule 9) again whenever the index or the cluster's addresses change and at its deadline at the
// latest; nothing is decided before the cluster's addresses are known. CSRs go through the keyed work queue
// (kube/workqueue.ts): one decision per CSR at a time, a failed write retried with backoff. Only the leader
// decides and writes: the approval subresource, with the condition and the resourceVersion it decided on, and
// one Event per decision.
import type { CertificateSigningRequest, CertificateSigningRequestCondition } from "kubernetes-types/certificates/v1.js";
import type { Node, Service } from "kubernetes-types/core/v1.js";
import type { EndpointSlice } from "kubernetes-types/discovery/v1.js";
import type { Logger } from "../cli/log.ts";
import type { BackoffOptions } from "../time/backoff.ts";
import { isApiError } from "../kube/errors.ts";
import { csrReference, type EventRecorder } from "../kube/events.ts";
import type { InformerHandlers } from "../kube/informer.ts";
import type { KubeObject, Resource, ResourceRef } from "../kube/resource.ts";
import { WorkQueue } from "../kube/workqueue.ts";
import { type ClusterAddresses, clusterAddresses, type ServiceCidr } from "./cluster.ts";
import {
  type CsrConfig,
  type CsrDecision,
  csrFacts,
  decidedState,
  decideCSR,
  KUBELET_SERVING_SIGNER,
} from "./decide.ts";
import type { CsrApproverMetrics } from "./metrics.ts";
import { type IndexedNode, indexNode, indexNodes, type NodeIndex, nodeFacts } from "./nodes.ts";

type Csr = CertificateSigningRequest;

export const CSR_RESOURCE: ResourceRef = {
  group: "certificates.k8s.io",
  version: "v1",
  plural: "certificatesigningrequests",
};

/** The apiserver selects CSRs by signer: the informer lists and watches ours only. */
export const KUBELET_SERVING_SELECTOR = `spec.signerName=${KUBELET_SERVING_SIGNER}`;

/** The conditions' reasons, as kube-controller-manager's approver names its own. */
const APPROVED_REASON = "AutoApproved";
const DENIED_REASON = "AutoDenied";

/**
 * The informer's transform: a decided CSR shrinks to what says so (an issued certificate and the request are
 * kilobytes each, and decide nothing more); an undecided one is kept whole but its managedFields, since the
 * approval is written back on it.
 */
export function csrTransform(csr: Csr): Csr {
  const { metadata = {}, spec, status } = csr;
  const decided = decidedState(csr);
  // "issued" without a condition cannot happen through the API (the signer needs an approval): kept whole.
  if (decided === undefined || decided === "issued") return { ...csr, metadata: { ...metadata, managedFields: undefined } };
  const { name, uid, resourceVersion, creationTimestamp } = metadata;
  return {
    metadata: { name, uid, resourceVersion, creationTimestamp },
    spec: { signerName: spec.signerName, request: "" },
    status: { conditions: status?.conditions?.map(({ type, status }) => ({ type, status })) },
  };
}

/** The CSR informer satisfies this. */
export interface CsrCache {
  get(name: string): Csr | undefined;
  list(): Csr[];
}

/** An informer satisfies this. */
export interface ListCache<T> {
  list(): T[];
  hasSynced(): boolean;
}

/** The caches of the cluster's own addresses (rule 5b), each fed by its informer (cluster.ts). */
export interface ClusterCaches {
  serviceCidrs: ListCache<ServiceCidr>;
  services: ListCache<Service>;
  endpointSlices: ListCache<EndpointSlice>;
}

export interface CsrControllerOptions {
  config: CsrConfig;
  dryRun: boolean;
  cache: CsrCache;
  cluster: ClusterCaches;
  /** The approval subresource's PUT. */
  csrs: Pick<Resource<Csr>, "update">;
  /** True while this replica may decide and write (always, without leader election). */
  isLeader(): boolean;
  events: Pick<EventRecorder, "record">;
  log: Logger;
  metrics: CsrApproverMetrics;
  /** CSRs decided (and written) at once (default 10). */
  workers?: number;
  /** Retry delays of a CSR whose write failed (default 1 s doubling to 60 s). */
  retryBackoff?: BackoffOptions;
  now?: () => Date;
}

/** How soon a CSR is asked again when a cluster cache has not synced (the program waits for them first). */
const CLUSTER_SYNC_RETRY_MS = 1000;

type Verdict = Extract<CsrDecision, { action: "approve" | "deny" }>;
type Waiting = Extract<CsrDecision, { action: "wait" }>;

export class CsrController {
  private readonly options: Required<Omit<CsrControllerOptions, "now">> & { now: () => Date };
  private readonly nodes = new Map<string, IndexedNode>();
  /** Built from `nodes` when a decision needs it; undefined once a Node changed in a way it shows. */
  private index: NodeIndex | undefined;
  /** Built from the cluster caches when a decision needs it; undefined once one of them changed. */
  private cluster: ClusterAddresses | undefined;
  private readonly queue: WorkQueue;
  /** CSRs that wait for their Node: the timer of their deadline, and the reason last logged. */
  private readonly waiting = new Map<string, { timer: NodeJS.Timeout; reason: string }>();
  /** The resourceVersion each CSR was approved or denied at (or logged at, in dry run): never twice. */
  private readonly acted = new Map<string, string | undefined>();
  private started = false;
  private stopped = false;

  constructor(options: CsrControllerOptions) {
    this.options = {
      workers: 10,
      retryBackoff: { baseMs: 1000, capMs: 60_000 },
      now: () => new Date(),
      ...options,
    };
    this.queue = new WorkQueue({
      workers: this.options.workers,
      backoff: this.options.retryBackoff,
      sync: (name) => this.sync(name),
      onError: (name, err, retryInMs) => this.options.log.error("deciding CSR failed", { csr: name, err, retryInMs }),
    });
  }

  readonly csrHandlers: InformerHandlers<Csr> = {
    onAdd: (csr) => this.enqueue(nameOf(csr)),
    onUpdate: (_, csr) => this.enqueue(nameOf(csr)),
    onDelete: (csr) => this.forget(nameOf(csr)),
  };

  /** For the program's node informer: keeps the index, and wakes waiting CSRs when it changes. */
  readonly nodeHandlers: InformerHandlers<Node> = {
    onAdd: (node) => this.nodeChanged(node),
    onUpdate: (_, node) => this.nodeChanged(node),
    onDelete: (node) => {
      if (this.nodes.delete(nameOf(node))) this.nodesChanged();
    },
  };

  /** For the informers of the cluster's addresses: any change may decide a waiting CSR (as a Node's may). */
  readonly clusterHandlers: InformerHandlers<KubeObject> = {
    onAdd: () => this.clusterChanged(),
    onUpdate: () => this.clusterChanged(),
    onDelete: () => this.clusterChanged(),
  };

  /** Decides every cached CSR (call once the caches have synced; nothing is decided before the cluster's have). */
  start(): void {
    this.started = true;
    this.resync();
  }

  /** Decides every cached CSR again: at start, and when this replica starts leading. */
  resync(): void {
    for (const csr of this.options.cache.list()) this.enqueue(nameOf(csr));
  }

  /** Stops deciding, and waits for writes in flight (an approval already sent completes). */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const { timer } of this.waiting.values()) clearTimeout(timer);
    this.waiting.clear();
    await this.queue.stop();
  }

  private nodeChanged(node: Node): void {
    const indexed = indexNode(nodeFacts(node));
    const before = this.nodes.get(indexed.name);
    this.nodes.set(indexed.name, indexed);
    if (!before || !sameIndexedNode(before, indexed)) this.nodesChanged();
  }

  /** Any Node's names or IPs can decide a waiting CSR (another Node may have held its address): all wake. */
  private nodesChanged(): void {
    this.index = undefined;
    this.wakeWaiting();
  }

  private clusterChanged(): void {
    this.cluster = undefined;
    this.wakeWaiting();
  }

  private wakeWaiting(): void {
    for (const name of this.waiting.keys()) this.enqueue(name);
  }

  /** Fail safe: without the cluster's addresses rule 5b cannot be checked, so nothing is decided. */
  private clusterSynced(): boolean {
    const { serviceCidrs, services, endpointSlices } = this.options.cluster;
    return serviceCidrs.hasSynced() && services.hasSynced() && endpointSlices.hasSynced();
  }

  /** Events before start() are taken in by its resync. */
  private enqueue(name: string): void {
    if (this.started && !this.stopped) this.queue.add(name);
  }

  private forget(name: string): void {
    this.stopWaiting(name);
    this.acted.delete(name);
    this.updateGauges();
  }

  /** Decides one CSR and writes the verdict; a failed write throws, and the queue tries it again later. */
  private async sync(name: string): Promise<void> {
    const { options } = this;
    this.updateGauges();
    // Followers keep the caches current, for a quick takeover (resync); nothing more.
    if (!options.isLeader()) return;
    // The program starts the loop once every cache has synced; should one not have, ask again shortly.
    if (!this.clusterSynced()) return this.queue.addAfter(name, CLUSTER_SYNC_RETRY_MS);
    const csr = options.cache.get(name);
    if (!csr) return this.forget(name);
    this.index ??= indexNodes(this.nodes.values());
    const { serviceCidrs, services, endpointSlices } = options.cluster;
    this.cluster ??= clusterAddresses(serviceCidrs.list(), services.list(), endpointSlices.list());
    const now = options.now();
    const decision = decideCSR(csrFacts(csr), this.index, options.config, now, this.cluster);
    if (decision.action !== "wait") this.stopWaiting(name);
    if (decision.action === "ignore") {
      options.log.v(4)?.("CSR left alone", { csr: name, reason: decision.reason });
      return;
    }
    if (decision.action === "wait") return this.wait(csr, decision, now);
    const resourceVersion = csr.metadata?.resourceVersion;
    // Our own write reaches the cache a moment later: until then the cached copy must not be decided twice.
    if (this.acted.has(name) && this.acted.get(name) === resourceVersion) return;
    this.acted.set(name, resourceVersion);
    await this.act(csr, decision, now);
  }

  /** Rule 9: decided again when a Node changes (nodesChanged) or at the deadline. */
  private wait(csr: Csr, decision: Waiting, now: Date): void {
    const name = nameOf(csr);
    const previous = this.waiting.get(name);
    clearTimeout(previous?.timer);
    // A millisecond past the deadline, so that the decision then sees it passed.
    const timer = setTimeout(() => this.enqueue(name), decision.until.getTime() - now.getTime() + 1);
    timer.unref();
    this.waiting.set(name, { timer, reason: decision.reason });
    if (previous?.reason === decision.reason) return;
    this.options.log.info("CSR waits for its node", { csr: name, rule: decision.rule, reason: decision.reason });
    this.options.events.record(csrReference(csr), "Normal", "WaitingForNode", decision.reason);
    this.updateGauges();
  }

  private stopWaiting(name: string): void {
    clearTimeout(this.waiting.get(name)?.timer);
    this.waiting.delete(name);
  }

  private async act(csr: Csr, decision: Verdict, now: Date): Promise<void> {
    const { options } = this;
    const name = nameOf(csr);
    const approve = decision.action === "approve";
    const log = options.log.with({ csr: name, user: csr.spec.username });
    if (options.dryRun) {
      this.decided(csr, decision, approve ? "would-approve" : "would-deny", now);
      log.info(`would ${approve ? "approve" : "deny"} CSR (dry run)`, { rule: decision.rule, reason: decision.reason });
      const [type, reason] = approve ? (["Normal", "WouldApprove"] as const) : (["Warning", "WouldDeny"] as const);
      options.events.record(csrReference(csr), type, reason, `would ${decision.action} (dry run): ${decision.reason}`);
      return;
    }
    // Leadership can lapse between the decision and the write: the last check is right before the call.
    if (!options.isLeader()) {
      this.acted.delete(name);
      return;
    }
    try {
      await options.csrs.update(withCondition(csr, decision, now), { subresource: "approval" });
    } catch (err) {
      this.acted.delete(name);
      if (isApiError(err, "NotFound")) return;
      if (isApiError(err, "Conflict")) {
        // The CSR changed since it was read: the informer brings the new version, which is decided afresh.
        options.metrics.decisions.with({ result: "conflict", rule: decision.rule }).inc();
        log.v(2)?.("CSR changed meanwhile; deciding it again");
        return;
      }
      options.metrics.decisions.with({ result: "error", rule: decision.rule }).inc();
      throw new Error(`${approve ? "approving" : "denying"} failed: ${(err as Error).message}`, { cause: err });
    }
    this.decided(csr, decision, approve ? "approved" : "denied", now);
    log.info(approve ? "approved CSR" : "denied CSR", { rule: decision.rule, reason: decision.reason });
    const [type, reason] = approve ? (["Normal", "Approved"] as const) : (["Warning", "Denied"] as const);
    options.events.record(csrReference(csr), type, reason, decision.reason);
  }

  private decided(csr: Csr, decision: Verdict, result: string, now: Date): void {
    const { metrics } = this.options;
    metrics.decisions.with({ result, rule: decision.rule }).inc();
    const created = Date.parse(csr.metadata?.creationTimestamp ?? "");
    if (!Number.isNaN(created)) metrics.decisionSeconds.observe(Math.max(0, now.getTime() - created) / 1000);
  }

  private updateGauges(): void {
    const { metrics, cache } = this.options;
    metrics.pending.set(cache.list().filter((csr) => decidedState(csr) === undefined).length);
    metrics.waiting.set(this.waiting.size);
  }
}

/** The CSR as read, with the Approved or Denied condition added (the approval subresource writes only these). */
function withCondition(csr: Csr, decision: Verdict, now: Date): Csr {
  const approve = decision.action === "approve";
  const condition: CertificateSigningRequestCondition = {
    type: approve ? "Approved" : "Denied",
    status: "True",
    reason: approve ? APPROVED_REASON : DENIED_REASON,
    message: decision.reason,
    lastUpdateTime: now.toISOString(),
  };
  const conditions = [...(csr.status?.conditions ?? []), condition];
  return { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", ...csr, status: { conditions } };
}

function sameIndexedNode(a: IndexedNode, b: IndexedNode): boolean {
  return a.uninitialized === b.uninitialized && sameSet(a.ips, b.ips) && sameSet(a.dnsNames, b.dnsNames);
}

const sameSet = (a: Set<string>, b: Set<string>) => a.size === b.size && [...a].every((item) => b.has(item));

const nameOf = (obj: { metadata?: { name?: string } }) => obj.metadata?.name ?? "";
