// The node-lifecycle-controller's decision, as pure functions of plain data: which nodes are
// watched, whether the cluster is healthy enough to delete anything, and for one node whether to
// skip it, probe it, or delete it — always with a short reason that logs and Events reuse.
//
// Deciding takes two calls. Without a probe result, decide() answers "probe" when every rule but
// reachability says delete (probing is the expensive part). With the probe result it answers
// "delete" only for a node that every rule allows and that no probe reached. A skip that only time
// can end says until when, so the controller need not ask again before.
import type { Node } from "kubernetes-types/core/v1.js";
import { formatDuration } from "../cli/duration.ts";
import {
  formatKeyValue,
  type KeyValueMatcher,
  type LabelSelector,
  matchesKeyValue,
  matchesLabels,
} from "../kube/labelselector.ts";
import type { ProbeResult } from "../net/probe.ts";

export interface LifecycleConfig {
  /** Set and non-empty: only matching nodes are watched (the autoscaler taint is then ignored). */
  nodeSelector?: LabelSelector;
  watchAutoscalerTaint: boolean;
  protectedLabels: KeyValueMatcher[];
  protectedAnnotations: KeyValueMatcher[];
  notReadyTimeoutMs: number;
  /** 0 allows no deletion at all. */
  maxDeletionsPerMinute: number;
  unhealthyThreshold: number;
}

export interface ClusterHealth {
  considered: number;
  notReady: number;
  paused: boolean;
  reason: string;
}

/** Which rule skipped a node: metrics count by it, and the controller events only the late ones. */
export type SkipClass =
  | "unwatched" // control-plane or outside the filter
  | "deleting"
  | "ready"
  | "not-expired" // NotReady for less than the timeout, or since an unknown time
  | "protected" // by a label or annotation, while NotReady past the timeout
  | "paused" // mass-deletion guard
  | "rate-limited"
  | "reachable"
  | "inconclusive";

export type Decision =
  /**
   * `until`: when the same node and cluster may be decided otherwise (its timeout ends, a deletion leaves
   * the rate window); the controller decides the node again then.
   */
  | { action: "skip"; class: SkipClass; reason: string; until?: Date }
  | { action: "probe"; reason: string }
  | { action: "delete"; reason: string };

export interface DecisionContext {
  health: ClusterHealth;
  /** When this controller deleted nodes, for the per-minute limit (older entries may be dropped). */
  deletionTimes: Date[];
  /** Absent in the first phase. */
  probe?: ProbeResult;
}

const CONTROL_PLANE_LABELS = ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"];
export const AUTOSCALER_TAINT = { key: "ToBeDeletedByClusterAutoscaler", effect: "NoSchedule" };
const RATE_WINDOW_MS = 60_000;

export function isControlPlane(node: Node): boolean {
  const labels = node.metadata?.labels ?? {};
  return CONTROL_PLANE_LABELS.some((key) => Object.hasOwn(labels, key));
}

/** Why a node is outside the filter (selector > autoscaler taint > all non-control-plane), or undefined. */
function unwatchedReason(node: Node, config: LifecycleConfig): string | undefined {
  if (isControlPlane(node)) return "control-plane node";
  // An empty selector is the flag's default ("") and means "not set", not "select everything".
  if (config.nodeSelector?.requirements.length)
    return matchesLabels(config.nodeSelector, node.metadata?.labels)
      ? undefined
      : `not selected by node selector ${config.nodeSelector.text}`;
  if (!config.watchAutoscalerTaint) return undefined;
  const tainted = (node.spec?.taints ?? []).some(
    (taint) => taint.key === AUTOSCALER_TAINT.key && taint.effect === AUTOSCALER_TAINT.effect,
  );
  return tainted ? undefined : `no ${AUTOSCALER_TAINT.key}:${AUTOSCALER_TAINT.effect} taint`;
}

/** Whether the filter table selects the node; control-plane nodes never are. */
export function isWatched(node: Node, config: LifecycleConfig): boolean {
  return unwatchedReason(node, config) === undefined;
}

function protectionReason(node: Node, config: LifecycleConfig): string | undefined {
  const label = config.protectedLabels.find((matcher) => matchesKeyValue(matcher, node.metadata?.labels));
  if (label) return `protected by label ${formatKeyValue(label)}`;
  const annotation = config.protectedAnnotations.find((matcher) =>
    matchesKeyValue(matcher, node.metadata?.annotations),
  );
  if (annotation) return `protected by annotation ${formatKeyValue(annotation)}`;
  return undefined;
}

const readyCondition = (node: Node) =>
  node.status?.conditions?.find((condition) => condition.type === "Ready");

/** Ready only when the Ready condition says True; a missing Ready counts as Unknown, as in kube-controller-manager. */
export function isReady(node: Node): boolean {
  return readyCondition(node)?.status === "True";
}

function parseTime(time: string | undefined): Date | undefined {
  if (time === undefined) return undefined;
  const date = new Date(time);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/**
 * Since when the node has been NotReady, from the API (so a restart or a new leader keeps the
 * timing): the Ready condition's lastTransitionTime when it is False or Unknown. A node with no
 * Ready condition has never reported Ready, so it counts from its creationTimestamp. Undefined for
 * a Ready node and wherever the timestamp is missing or malformed: such a node never expires.
 */
export function notReadySince(node: Node): Date | undefined {
  const ready = readyCondition(node);
  if (!ready) return parseTime(node.metadata?.creationTimestamp);
  if (ready.status === "True") return undefined;
  return parseTime(ready.lastTransitionTime);
}

/** Mass-deletion guard over all non-control-plane nodes (watched or not), as kube-controller-manager's. */
export function clusterHealth(nodes: Node[], threshold: number): ClusterHealth {
  const considered = nodes.filter((node) => !isControlPlane(node));
  const notReady = considered.filter((node) => !isReady(node)).length;
  const paused = considered.length > 2 && notReady / considered.length >= threshold;
  const counts = `${notReady} of ${considered.length} nodes NotReady`;
  return {
    considered: considered.length,
    notReady,
    paused,
    reason: paused
      ? `deletions paused: ${counts} (≥ ${formatPercent(threshold)})`
      : `deletions allowed: ${counts} (pause at ≥ ${formatPercent(threshold)} of more than 2)`,
  };
}

/**
 * Deletions within the last minute, for --max-deletions-per-minute. Entries later than now count too:
 * after the clock steps back they are still recent deletions, and must not reopen the limit.
 */
export function recentDeletions(deletionTimes: Date[], now: Date): Date[] {
  return deletionTimes.filter((time) => time.getTime() > now.getTime() - RATE_WINDOW_MS);
}

/** When enough of the deletions have left the rate window for one more; undefined when none ever may. */
function rateWindowOpens(recent: Date[], limit: number): Date | undefined {
  if (limit <= 0) return undefined;
  const oldest = recent.map((time) => time.getTime()).sort((a, b) => a - b);
  return new Date((oldest[oldest.length - limit] as number) + RATE_WINDOW_MS);
}

export function decide(node: Node, now: Date, config: LifecycleConfig, context: DecisionContext): Decision {
  const skip = (skipClass: SkipClass, reason: string, until?: Date): Decision => ({
    action: "skip",
    class: skipClass,
    reason,
    ...(until ? { until } : {}),
  });
  const unwatched = unwatchedReason(node, config);
  if (unwatched) return skip("unwatched", unwatched);
  if (node.metadata?.deletionTimestamp) return skip("deleting", "already being deleted");

  const since = notReadySince(node);
  if (!since)
    return isReady(node)
      ? skip("ready", "Ready")
      : skip("not-expired", "NotReady since an unknown time (no lastTransitionTime)");
  const notReadyFor = Math.max(0, Math.floor((now.getTime() - since.getTime()) / 1000) * 1000);
  const timing = `NotReady for ${formatDuration(notReadyFor)}, timeout ${formatDuration(config.notReadyTimeoutMs)}`;
  const expiry = new Date(since.getTime() + config.notReadyTimeoutMs);
  if (now < expiry) return skip("not-expired", timing, expiry);
  // After the timing: "protected" then means the protection is what keeps this dead node (and is evented).
  const protection = protectionReason(node, config);
  if (protection) return skip("protected", `${protection} (${timing})`);

  if (context.health.paused) return skip("paused", context.health.reason);
  const recent = recentDeletions(context.deletionTimes, now);
  if (recent.length >= config.maxDeletionsPerMinute) {
    const reason = `rate limit: ${recent.length} deletions in the last minute`;
    return skip("rate-limited", reason, rateWindowOpens(recent, config.maxDeletionsPerMinute));
  }

  const { probe } = context;
  if (!probe) return { action: "probe", reason: timing };
  // An inconclusive probe (no probe could run on some address) proves nothing: never delete on it.
  if (probe.inconclusive) return skip("inconclusive", probe.detail);
  if (probe.alive) return skip("reachable", probe.detail);
  return { action: "delete", reason: `${timing}; ${probe.detail}` };
}


const formatPercent = (fraction: number) => `${Number((fraction * 100).toFixed(1))}%`;
