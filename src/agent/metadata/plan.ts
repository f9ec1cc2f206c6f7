// Set once, never fight: what of the resolved metadata the Node should get. The providerID only
// while the Node has none (Kubernetes refuses to change it); the labels only while the Node is being
// initialised, unless the agent is told it owns them; a value someone else wrote is kept and the
// disagreement reported. Pure; the JSON patch that applies a plan is built here too.
import type { Node, Taint } from "kubernetes-types/core/v1.js";
import type { InstanceMetadata } from "./providers.ts";
import { LABEL_FIELDS, type LabelField } from "./rules.ts";

/** The only labels the agent ever writes (the node-scope admission policy allows no others). */
export const METADATA_LABELS: Readonly<Record<LabelField, string>> = {
  region: "topology.kubernetes.io/region",
  zone: "topology.kubernetes.io/zone",
  instanceType: "node.kubernetes.io/instance-type",
};

export interface MetadataNote {
  reason: "ProviderIDMismatch" | "MetadataLabelKept" | "MetadataLabelNotAdded";
  message: string;
}

export interface MetadataPlan {
  /** Set only when the Node has no providerID. */
  providerID?: string;
  /** Label key → the value to write (added or changed). */
  labels: Record<string, string>;
  /** Taints to add (node init rules, nodeinit.ts): only while the Node has the uninitialized taint. */
  taints: Taint[];
  notes: MetadataNote[];
}

export interface PlanOptions {
  /** The Node still has the uninitialized taint: labels may be added. */
  initialising: boolean;
  /** --update-metadata-labels: the agent owns the labels and brings them in line at any time. */
  updateLabels: boolean;
}

export function desiredMetadata(node: Node, metadata: InstanceMetadata, options: PlanOptions): MetadataPlan {
  const plan: MetadataPlan = { labels: {}, taints: [], notes: [] };
  const current = node.spec?.providerID ?? "";
  if (metadata.providerID && current === "") plan.providerID = metadata.providerID;
  else if (metadata.providerID && current !== metadata.providerID)
    plan.notes.push({
      reason: "ProviderIDMismatch",
      message:
        `spec.providerID is ${current}, the node's metadata says ${metadata.providerID}: ` +
        "kept (a providerID cannot change)",
    });
  const labels = node.metadata?.labels ?? {};
  for (const field of LABEL_FIELDS) {
    const [key, wanted, existing] = [METADATA_LABELS[field], metadata[field], labels[METADATA_LABELS[field]]];
    if (!wanted || existing === wanted) continue;
    if (options.updateLabels || (existing === undefined && options.initialising)) plan.labels[key] = wanted;
    else if (existing === undefined)
      plan.notes.push({
        reason: "MetadataLabelNotAdded",
        message:
          `${key} is not set and the node is already initialised: ` +
          `not adding ${wanted} (--update-metadata-labels would)`,
      });
    else
      plan.notes.push({
        reason: "MetadataLabelKept",
        message: `${key} is ${existing} (set by kubelet or a person), the node's metadata says ${wanted}: kept`,
      });
  }
  return plan;
}

export function isEmptyPlan(plan: MetadataPlan): boolean {
  return plan.providerID === undefined && Object.keys(plan.labels).length === 0 && plan.taints.length === 0;
}

export type PatchOperation = { op: "add" | "replace" | "test" | "remove"; path: string; value?: unknown };

/** RFC 6901: "~" and "/" in a key. */
const pointer = (key: string) => key.replaceAll("~", "~0").replaceAll("/", "~1");

/**
 * JSON patch operations that apply `plan` to `node` as read. Each changed value is tested first, so
 * the patch fails rather than overwrite a value someone wrote since; where the value was absent,
 * the caller's resourceVersion precondition is the guard (a JSON patch cannot test for absence).
 */
export function metadataPatch(node: Node, plan: MetadataPlan): PatchOperation[] {
  const ops: PatchOperation[] = [];
  if (plan.providerID !== undefined) {
    if (!node.spec) ops.push({ op: "add", path: "/spec", value: { providerID: plan.providerID } });
    else if (node.spec.providerID === undefined)
      ops.push({ op: "add", path: "/spec/providerID", value: plan.providerID });
    else
      ops.push(
        { op: "test", path: "/spec/providerID", value: node.spec.providerID },
        { op: "replace", path: "/spec/providerID", value: plan.providerID },
      );
  }
  const entries = Object.entries(plan.labels);
  const labels = node.metadata?.labels;
  if (entries.length > 0 && !labels) ops.push({ op: "add", path: "/metadata/labels", value: plan.labels });
  else
    for (const [key, value] of entries) {
      const path = `/metadata/labels/${pointer(key)}`;
      const existing = labels?.[key];
      if (existing === undefined) ops.push({ op: "add", path, value });
      else ops.push({ op: "test", path, value: existing }, { op: "replace", path, value });
    }
  // Appended, so the index of a taint the caller removes in the same patch stays valid.
  if (plan.taints.length > 0 && !node.spec?.taints) ops.push({ op: "add", path: "/spec/taints", value: plan.taints });
  else for (const taint of plan.taints) ops.push({ op: "add", path: "/spec/taints/-", value: taint });
  return ops;
}
