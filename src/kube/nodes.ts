// Facts about Node objects that more than one controller reads.
import type { Node } from "kubernetes-types/core/v1.js";

/**
 * The taint kubelet sets with --cloud-provider=external and a cloud controller (here: the agent) removes once
 * the Node's addresses are final.
 */
export const UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized";

/** Whether the Node still carries the uninitialized taint (its addresses may not be final). */
export function isUninitialized(node: Node): boolean {
  return (node.spec?.taints ?? []).some((taint) => taint.key === UNINITIALIZED_TAINT);
}
