// The agent's reconcile loop around the pure rules: detect (netlink, no API call) → desiredAddresses
// → write only what differs. Triggers: the watched Node, netlink address/route changes, and a resync
// timer that re-runs only the local detection. They queue the one key, this node, on the work queue
// (kube/workqueue.ts): reconciles never overlap, a trigger during one runs another right after (the
// last change is never missed), and a failed one is retried with backoff.
import type { Node, NodeAddress, Taint } from "kubernetes-types/core/v1.js";
import type { Logger } from "../cli/log.ts";
import { backoffDelay, sleep } from "../time/backoff.ts";
import { isApiError } from "../kube/errors.ts";
import { type EventRecorder, nodeReference } from "../kube/events.ts";
import { isUninitialized, UNINITIALIZED_TAINT } from "../kube/nodes.ts";
import type { Resource } from "../kube/resource.ts";
import { WorkQueue } from "../kube/workqueue.ts";
import type { Netlink } from "../net/netlink.ts";
import { desiredAddresses, hasInternalIP, parseProvidedNodeIPs, sameAddresses } from "./addresses.ts";
import { type Detection, type DetectionConfig, detectAddresses } from "./detect.ts";
import { checkLocalNode, type LocalNodeInput } from "./localnode.ts";
import type { InstanceMetadataSource, Lookup } from "./metadata/client.ts";
import { desiredNodeInit, describeItem, type InitItem, type InitNote, type InitRule, taintOf } from "./metadata/nodeinit.ts";
import { desiredMetadata, METADATA_LABELS, type MetadataPlan, metadataPatch } from "./metadata/plan.ts";
import { type DmiField, LABEL_FIELDS, type Resolved, type RulesConfig, resolveMetadata } from "./metadata/rules.ts";
import type { AgentMetrics } from "./metrics.ts";

export const PROVIDED_NODE_IP_ANNOTATION = "alpha.kubernetes.io/provided-node-ip";
const MAX_CONFLICT_RETRIES = 5;

export interface AgentOptions {
  nodeName: string;
  detection: DetectionConfig;
  removeTaint: boolean;
  /** Write the Node only when one of its kubelet-reported IPs is an address of this host (localnode.ts). */
  requireLocalNode: boolean;
  /** Set when the Node gets metadata (instance metadata, a providerID template or rules). */
  metadata?: MetadataOptions;
}

export interface MetadataOptions {
  source: InstanceMetadataSource;
  rules: RulesConfig;
  updateLabels: boolean;
  /** --node-label-rules and --node-taint-rules. */
  initRules: InitRule[];
  /** The host's DMI system information, read once at start ("" where there is none). */
  dmi: Readonly<Record<DmiField, string>>;
}

export interface AgentDeps {
  nodes: Resource<Node>;
  netlink: Netlink;
  events: EventRecorder;
  log: Logger;
  metrics: AgentMetrics;
  /** Called after each reconcile that succeeded. */
  onReconciled?: (result: ReconcileResult) => void;
}

/** What one reconcile did, for logs, tests and --run-once. */
export interface ReconcileResult {
  /** Why nothing was written: the Node is not this host (--require-local-node). */
  refused?: string;
  addressesWritten: boolean;
  taintRemoved: boolean;
  /** Why the taint stays, when it does. */
  taintKept?: string;
  /** Why the Node has no metadata yet although it was configured to get some (the taint then stays). */
  metadataUnavailable?: string;
  metadataWritten: boolean;
  detection: Detection;
}

interface Finding {
  reason:
    | "DetectionFailed"
    | "NodeNotLocal"
    | "ProvidedNodeIPMismatch"
    | "TaintKept"
    | MetadataPlan["notes"][number]["reason"]
    | InitNote["reason"]
    | "MetadataRuleUnmatched"
    | "MetadataUnavailable"
    | "MetadataSkipped";
  message: string;
}

/** What this reconcile writes of the metadata, or why it cannot yet (then the taint stays). */
interface MetadataStep {
  plan?: MetadataPlan;
  resolved?: Resolved;
  /** What the node init rules add, each with its rule (also in `plan`). */
  init?: InitItem[];
  unavailable?: string;
  findings: Finding[];
}

export class NodeNotFoundError extends Error {
  override name = "NodeNotFoundError";
}

export class Agent {
  private readonly options: AgentOptions;
  private readonly deps: AgentDeps;
  private readonly queue: WorkQueue;
  /** The informer's copy of the Node, as the last trigger gave it. */
  private cached: () => Node | undefined = () => undefined;
  /** Findings of the previous reconcile: each is reported when it appears, not on every pass (no writes at rest). */
  private findings = new Set<string>();
  /** Outcome of the last reconcile, for /readyz: its error, or its result. */
  lastError: unknown;
  lastResult: ReconcileResult | undefined;
  /** The local-node rule last logged, so that "cannot be checked" is said once, not every pass. */
  private localNodeRule: string | undefined;

  constructor(options: AgentOptions, deps: AgentDeps) {
    this.options = options;
    this.deps = deps;
    this.queue = new WorkQueue({
      sync: () => this.sync(),
      onError: (_, err, retryInMs) => this.report(err, retryInMs),
    });
  }

  /**
   * Asks for a reconcile. `cached` supplies the Node the informer holds (no API call when nothing
   * changes); conflicts fall back to fresh reads.
   */
  trigger(cached: () => Node | undefined): void {
    this.cached = cached;
    this.queue.add(this.options.nodeName);
  }

  /** No reconcile starts after this (a retry waiting is dropped); resolves when the one under way has ended. */
  stop(): Promise<void> {
    return this.queue.stop();
  }

  /** The queue's sync: one reconcile, its outcome kept for /readyz; a failure throws, to be retried. */
  private async sync(): Promise<void> {
    try {
      this.lastResult = await this.reconcile(this.cached);
      this.lastError = undefined;
      this.deps.onReconciled?.(this.lastResult);
    } catch (err) {
      this.lastError = err;
      this.lastResult = undefined;
      throw err;
    }
  }

  /** One reconcile: detect locally, then bring the Node in line, re-reading it on conflicts. */
  async reconcile(cached: () => Node | undefined): Promise<ReconcileResult> {
    const { metrics, log } = this.deps;
    const started = performance.now();
    const [detection, lookup, host] = await Promise.all([
      detectAddresses(this.deps.netlink, this.options.detection).finally(() =>
        metrics.detectionSeconds.observe((performance.now() - started) / 1000),
      ),
      this.options.metadata?.source.lookup(),
      this.options.requireLocalNode ? this.deps.netlink.listAddresses() : undefined,
    ]);
    const hostAddresses = host?.map((a) => a.address);

    let node = cached();
    for (let attempt = 0; ; attempt++) {
      node ??= await this.fetch();
      try {
        const result = await this.apply(node, detection, lookup, hostAddresses);
        metrics.reconciles.with({ result: result.refused ? "refused" : "ok" }).inc();
        if (!result.refused) metrics.lastSuccess.set(Date.now() / 1000);
        if (!result.refused) metrics.uninitialized.set(result.taintKept === undefined ? 0 : 1);
        return result;
      } catch (err) {
        if (!isApiError(err, "Conflict") || attempt >= MAX_CONFLICT_RETRIES) throw err;
        log.v(2)?.("node changed while we wrote it; re-reading", { attempt });
        metrics.conflicts.inc();
        await sleep(backoffDelay(attempt, { baseMs: 50, capMs: 1000 }));
        node = undefined;
      }
    }
  }

  private async fetch(): Promise<Node> {
    try {
      return await this.deps.nodes.get(this.options.nodeName);
    } catch (err) {
      if (isApiError(err, "NotFound")) throw new NodeNotFoundError(`node "${this.options.nodeName}" not found`);
      throw err;
    }
  }

  private async apply(
    node: Node,
    detection: Detection,
    lookup: Lookup | undefined,
    hostAddresses: string[] | undefined,
  ): Promise<ReconcileResult> {
    const current = node.status?.addresses ?? [];
    const providedNodeIPs = parseProvidedNodeIPs(node.metadata?.annotations?.[PROVIDED_NODE_IP_ANNOTATION]);
    const refused = hostAddresses && this.refusal({ providedNodeIPs, addresses: current, hostAddresses });
    if (refused) {
      // Nothing else is reported: this host's findings say nothing about that Node.
      this.reportFindings(node, [{ reason: "NodeNotLocal", message: refused }]);
      return { refused, addressesWritten: false, taintRemoved: false, metadataWritten: false, detection };
    }
    const plan = desiredAddresses(current, detection, { providedNodeIPs });
    const findings: Finding[] = [
      ...detection.problems.map((p): Finding => ({ reason: "DetectionFailed", message: `${p.type}: ${p.message}` })),
      ...plan.notes.map((message): Finding => ({ reason: "ProvidedNodeIPMismatch", message })),
    ];
    for (const p of detection.problems) this.deps.metrics.detectionProblems.with({ type: p.type, reason: p.reason }).inc();

    let written = node;
    const addressesWritten = !sameAddresses(plan.addresses, current);
    if (addressesWritten) {
      written = await this.deps.nodes.update({ ...node, status: { ...node.status, addresses: plan.addresses } }, { subresource: "status" });
      this.deps.metrics.writes.with({ what: "addresses" }).inc();
      this.deps.log.info("node addresses updated", { node: this.options.nodeName, addresses: describe(plan.addresses), previous: describe(current) });
      this.deps.events.record(nodeReference(node), "Normal", "AddressesUpdated", `Node addresses set to ${describe(plan.addresses)}`);
    }
    const metadata = this.planMetadata(written, plan.addresses, lookup);
    findings.push(...metadata.findings);
    const taint = await this.writeMetadataAndTaint(written, plan.addresses, metadata);
    if (taint.taintKept) findings.push({ reason: "TaintKept", message: `Keeping ${UNINITIALIZED_TAINT}: ${taint.taintKept}` });
    this.reportFindings(node, findings);
    return { addressesWritten, ...taint, metadataUnavailable: metadata.unavailable, detection };
  }

  /** The metadata the Node should get from the lookup, the template and the rules (see metadata/). */
  private planMetadata(node: Node, addresses: NodeAddress[], lookup: Lookup | undefined): MetadataStep {
    const options = this.options.metadata;
    if (!options || !lookup) return { findings: [] };
    if (lookup.status === "unavailable")
      return { unavailable: lookup.reason, findings: [{ reason: "MetadataUnavailable", message: lookup.reason }] };
    const findings: Finding[] = [];
    if (lookup.status === "skipped" && options.source.mode !== "none")
      findings.push({ reason: "MetadataSkipped", message: lookup.reason });
    const facts = {
      nodeName: this.options.nodeName,
      systemUUID: node.status?.nodeInfo?.systemUUID ?? "",
      machineID: node.status?.nodeInfo?.machineID ?? "",
      productName: options.dmi.product_name,
      dmi: options.dmi,
      internalIPs: addresses.filter((a) => a.type === "InternalIP").map((a) => a.address),
    };
    const resolved = resolveMetadata(lookup.status === "found" ? lookup.metadata : {}, facts, options.rules);
    findings.push(...resolved.notes.map((message): Finding => ({ reason: "MetadataRuleUnmatched", message })));
    const initialising = isUninitialized(node);
    const plan = desiredMetadata(node, resolved.metadata, { initialising, updateLabels: options.updateLabels });
    findings.push(...plan.notes);
    // Init rules refuse the keys of the metadata labels (kubernetes.io namespaces), so the two never write one key.
    const init = desiredNodeInit(node, { ...facts, metadata: resolved.metadata }, options.initRules);
    findings.push(...init.notes);
    for (const item of init.labels) plan.labels[item.key] = item.value;
    plan.taints.push(...init.taints.map(taintOf));
    return { plan, resolved, init: [...init.labels, ...init.taints], findings };
  }

  /**
   * One write for the metadata and the taint, so the Node never loses the taint without its metadata.
   * The node is initialised once it has an InternalIP (kubelet's, provided or detected) and, when
   * metadata is configured, once the metadata lookup has answered.
   */
  private async writeMetadataAndTaint(
    node: Node,
    addresses: NodeAddress[],
    metadata: MetadataStep,
  ): Promise<Pick<ReconcileResult, "taintRemoved" | "taintKept" | "metadataWritten">> {
    const metadataOps = metadata.plan ? metadataPatch(node, metadata.plan) : [];
    const taints = node.spec?.taints ?? [];
    const index = this.options.removeTaint ? taints.findIndex((t) => t.key === UNINITIALIZED_TAINT) : -1;
    let taintKept: string | undefined;
    if (index >= 0 && !hasInternalIP(addresses))
      taintKept = "no InternalIP yet (from kubelet, provided-node-ip or detection)";
    else if (index >= 0 && metadata.unavailable) taintKept = `no metadata yet: ${metadata.unavailable}`;
    const removeTaint = index >= 0 && taintKept === undefined;
    if (metadataOps.length === 0 && !removeTaint) return { taintRemoved: false, taintKept, metadataWritten: false };
    // A JSON patch that fails unless the object is still the one we read (resourceVersion → 409)
    // and every value it replaces or removes is still what we saw: it changes our fields and nothing else.
    await this.deps.nodes.patch(this.options.nodeName, "json", [
      { op: "replace", path: "/metadata/resourceVersion", value: node.metadata?.resourceVersion },
      ...metadataOps,
      ...(removeTaint
        ? [
            { op: "test", path: `/spec/taints/${index}`, value: taints[index] as Taint },
            { op: "remove", path: `/spec/taints/${index}` },
          ]
        : []),
    ]);
    if (metadataOps.length > 0) this.recordMetadataWrite(node, metadata);
    if (removeTaint) {
      this.deps.metrics.writes.with({ what: "taint" }).inc();
      this.deps.log.info("node initialised: taint removed", { node: this.options.nodeName, taint: UNINITIALIZED_TAINT });
      const what = this.options.metadata ? "addresses and metadata" : "addresses";
      const message = `Removed ${UNINITIALIZED_TAINT}: the node has its ${what}`;
      this.deps.events.record(nodeReference(node), "Normal", "TaintRemoved", message);
    }
    return { taintRemoved: removeTaint, taintKept, metadataWritten: metadataOps.length > 0 };
  }

  private recordMetadataWrite(node: Node, { plan, resolved, init = [] }: MetadataStep): void {
    const written: Record<string, string> = { ...(plan?.providerID ? { providerID: plan.providerID } : {}), ...plan?.labels };
    for (const item of init) delete written[item.key];
    const fields = [
      ...(plan?.providerID ? ["providerID" as const] : []),
      ...LABEL_FIELDS.filter((field) => plan?.labels[METADATA_LABELS[field]] !== undefined),
    ];
    for (const field of fields)
      this.deps.metrics.metadataFields.with({ field, source: resolved?.sources[field] ?? "" }).inc();
    this.deps.metrics.writes.with({ what: "metadata" }).inc();
    for (const item of init) this.deps.metrics.nodeInitWrites.with({ kind: item.rule.kind }).inc();
    const text = [
      ...Object.entries(written).map(([key, value]) => `${key}=${value}`),
      ...init.map((item) => `${item.rule.kind} ${describeItem(item)} (rule ${item.rule.text})`),
    ].join(", ");
    this.deps.log.info("node metadata set", { node: this.options.nodeName, metadata: text });
    this.deps.events.record(nodeReference(node), "Normal", "MetadataSet", `Set ${text}`);
  }


  /** Why this Node must not be written from this host, or undefined; a Node with no IP yet is allowed (logged once). */
  private refusal(input: LocalNodeInput): string | undefined {
    const verdict = checkLocalNode(input);
    if (verdict.rule !== this.localNodeRule && verdict.rule === "no-node-ip")
      this.deps.log.info(`not checked that the node is this host: ${verdict.reason}`, { node: this.options.nodeName });
    this.localNodeRule = verdict.rule;
    if (verdict.local) return undefined;
    return (
      `refusing to write node "${this.options.nodeName}": it is not this host: ${verdict.reason}; ` +
      "run the agent on that node, or pass --require-local-node=false to manage it from elsewhere on purpose"
    );
  }

  /**
   * Detection problems, disagreements and a kept taint are reported (log + Event) when they appear;
   * one that persists is not reported again, so a steady state costs no API writes.
   */
  private reportFindings(node: Node, findings: Finding[]): void {
    const current = new Set<string>();
    for (const finding of findings) {
      const key = `${finding.reason}\u0000${finding.message}`;
      current.add(key);
      if (this.findings.has(key)) continue;
      if (/^(Metadata|NodeInit)/.test(finding.reason) || finding.reason === "ProviderIDMismatch")
        this.deps.metrics.metadataFindings.with({ reason: finding.reason }).inc();
      this.deps.log.warn(finding.message, { node: this.options.nodeName, reason: finding.reason });
      this.deps.events.record(nodeReference(node), "Warning", finding.reason, finding.message);
    }
    this.findings = current;
  }

  private report(err: unknown, retryInMs: number): void {
    const reason = isApiError(err) ? err.reason : err instanceof NodeNotFoundError ? "NodeNotFound" : "Error";
    this.deps.metrics.reconciles.with({ result: "error" }).inc();
    this.deps.metrics.errors.with({ reason }).inc();
    this.deps.log.error("reconcile failed", { node: this.options.nodeName, reason, err, retryInMs });
  }
}

function describe(addresses: NodeAddress[]): string {
  return addresses.map((a) => `${a.type}=${a.address}`).join(", ") || "(none)";
}
