// Nodes that share a spec.providerID. A providerID names one machine: cluster-autoscaler and cloud
// controllers find a Node by it, so two Nodes with one providerID make them act on the wrong one. It
// happens with cloned machines (one system UUID, so `--provider-id=local://{systemUUID}` gives each the
// same) and with a template that is not unique. Pure: the controller reports what this finds.
import type { Node } from "kubernetes-types/core/v1.js";

export interface SharedProviderID {
  providerID: string;
  /** The Nodes that have it, by name; at least two. */
  nodes: Node[];
  /** For logs and Events. */
  reason: string;
}

/** Every providerID more than one Node has (exact text, as those tools compare it), in providerID order. */
export function sharedProviderIDs(nodes: Node[]): SharedProviderID[] {
  const byID = new Map<string, Node[]>();
  for (const node of nodes) {
    const id = node.spec?.providerID;
    if (!id) continue; // not set yet: the agent or kubelet may still write it
    byID.set(id, [...(byID.get(id) ?? []), node]);
  }
  return [...byID]
    .filter(([, sharing]) => sharing.length > 1)
    .sort(([a], [b]) => byText(a, b))
    .map(([providerID, sharing]) => {
      const sorted = sharing.toSorted((a, b) => byText(nameOf(a), nameOf(b)));
      const names = sorted.map(nameOf).join(", ");
      return {
        providerID,
        nodes: sorted,
        reason:
          `spec.providerID ${providerID} is shared by ${sorted.length} Nodes (${names}); tools that find a node by ` +
          "its providerID (cluster-autoscaler, cloud controllers) may act on the wrong one: give each machine its own",
      };
    });
}

const nameOf = (node: Node) => node.metadata?.name ?? "";
/** Code-point order, the same on every machine (no locale). */
const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
