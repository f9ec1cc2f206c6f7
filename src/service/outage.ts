// The service controller's guard against a mass Ready=Unknown, as a pure function of plain data.
//
// Ready=Unknown is kube-controller-manager saying it heard no heartbeat, not kubelet saying its node is unwell. When
// kube-controller-manager's own view went stale (an API outage, an etcd election, its partition from the nodes), it
// marks every Node Unknown at once, though the nodes go on serving; kubelets put Ready back within seconds of being
// heard again. Node-address mode has no agent Lease to vouch for a node (as the L2 pools have), so this guard reads
// the pattern instead, as kube-controller-manager's zone disruption logic does: while at least --lb-unknown-threshold
// of the Nodes (or all of them) are Unknown, an Unknown node that carried traffic keeps carrying it (rule
// mass-unknown). KCM marks the Nodes one write at a time, and kubelets correct them one at a time: so that the first
// marks are not taken for single deaths before the rest arrive, and the last not dropped as the fraction falls back,
// a node keeps carrying for --lb-unknown-grace after it turned Unknown and after a mass Unknown ended (rule grace).
// A node alone Unknown past its grace leaves, as before. Only a node that carried traffic is held: the guard never
// brings back a node it dropped, or one that was ineligible before it turned Unknown (a controller starting amid the
// Unknown reads that from the ingress written before it: controller.ts adoptCarriers).
import type { Node } from "kubernetes-types/core/v1.js";
import { formatDuration } from "../cli/duration.ts";

export interface UnknownGuardConfig {
  /** A mass Unknown: at least this fraction of the Nodes (0 < x <= 1), or all of them, Ready=Unknown. */
  threshold: number;
  /** How long a node Unknown alone keeps carrying, from when it turned Unknown or a mass Unknown ended. */
  graceMs: number;
}

/** A Node whose Ready is Unknown, as the controller saw it. */
export interface UnknownNode {
  name: string;
  /** When the controller saw its Ready turn Unknown (monotonic ms). */
  sinceMs: number;
  /** It carried traffic at the last decision: eligible right before it turned Unknown, and held since. */
  carried: boolean;
}

export interface UnknownView {
  nowMs: number;
  /** Every Node. */
  nodes: number;
  /** The Nodes whose Ready is Unknown (carrying or not: the pattern is the cluster's). */
  unknown: readonly UnknownNode[];
}

/** What the guard remembers from one decision to the next. */
export interface UnknownGuardState {
  mass: boolean;
  /** When the last mass Unknown ended (monotonic ms; -Infinity: never). */
  massEndedMs: number;
}

export const INITIAL_GUARD_STATE: UnknownGuardState = { mass: false, massEndedMs: -Infinity };

export const HOLD_RULES = ["grace", "mass-unknown"] as const;
export type HoldRule = (typeof HOLD_RULES)[number];

export interface UnknownDecision {
  state: UnknownGuardState;
  /** The Unknown nodes that keep carrying traffic, and the rule that keeps each. */
  held: Map<string, HoldRule>;
  /** Carried until now and no longer: Unknown alone past the grace. */
  dropped: string[];
  /** Whether a mass Unknown holds, with the counts (for the log). */
  reason: string;
  /** When a grace ends, so that the controller decides again then; undefined when none runs. */
  nextMs: number | undefined;
}

export function isMassUnknown(unknown: number, nodes: number, threshold: number): boolean {
  return unknown > 0 && (unknown >= nodes || unknown / nodes >= threshold);
}

export function decideUnknownGuard(
  { nowMs, nodes, unknown }: UnknownView,
  before: UnknownGuardState,
  { threshold, graceMs }: UnknownGuardConfig,
): UnknownDecision {
  const mass = isMassUnknown(unknown.length, nodes, threshold);
  const massEndedMs = before.mass && !mass ? nowMs : before.massEndedMs;
  const counts = `${unknown.length} of ${nodes} Nodes Ready=Unknown`;
  const reason = mass
    ? `${counts} (at least ${percent(threshold)}, or all): kube-controller-manager's view is more likely stale ` +
      "than the nodes dead"
    : `${counts} (a mass Unknown from ${percent(threshold)}, or all)`;
  const held = new Map<string, HoldRule>();
  const dropped: string[] = [];
  let nextMs: number | undefined;
  for (const { name, sinceMs, carried } of unknown) {
    if (!carried) continue;
    if (mass) {
      held.set(name, "mass-unknown");
      continue;
    }
    const graceEndsMs = Math.max(sinceMs, massEndedMs) + graceMs;
    if (nowMs < graceEndsMs) {
      held.set(name, "grace");
      nextMs = Math.min(nextMs ?? Infinity, graceEndsMs);
    } else dropped.push(name);
  }
  return { state: { mass, massEndedMs }, held, dropped, reason, nextMs };
}

/** Why one node is held, for its log line. */
export function holdReason(rule: HoldRule, graceMs: number): string {
  return rule === "mass-unknown"
    ? "Ready=Unknown with many Nodes at once: kept in the ingress as no news"
    : `Ready=Unknown: kept in the ingress for ${formatDuration(graceMs)}, to tell one node from many`;
}

const percent = (fraction: number) => `${Number((fraction * 100).toFixed(1))}%`;

/** The Node as it would be with Ready True: what a held node carries is decided by every other rule still. */
export function asReady(node: Node): Node {
  const conditions = (node.status?.conditions ?? []).filter((condition) => condition.type !== "Ready");
  return { ...node, status: { ...node.status, conditions: [...conditions, { type: "Ready", status: "True" }] } };
}
