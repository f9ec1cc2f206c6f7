// Whether this node keeps an announcer Lease at all, as a pure function of plain data: --lb-l2-node-selector and
// its own Node's labels. Only selected nodes renew a Lease (one write a second each), watch their Services and
// announce; the pool controller assigns addresses only to nodes with a live Lease, so nothing else is needed.
import { type LabelSelector, matchesLabels } from "../../../kube/labelselector.ts";
import { NODE_UNKNOWN, type Selection } from "../method.ts";

export const SELECTION_RULES = [
  "every-node", // no selector: every node announces, its Node not even read
  NODE_UNKNOWN, // a selector, and the Node is not in the watch (not yet, or deleted): nothing to match
  "selected", // the Node's labels match the selector
  "not-selected", // they do not
] as const;
export type SelectionRule = (typeof SELECTION_RULES)[number];

/** `labels`: the Node's, undefined while the Node is not known. */
export function decideSelection(
  selector: LabelSelector | undefined,
  labels: Record<string, string> | undefined,
): Selection<SelectionRule> {
  if (!selector || selector.requirements.length === 0)
    return { announce: true, rule: "every-node", reason: "no --lb-l2-node-selector: every node announces" };
  const flag = `--lb-l2-node-selector ${JSON.stringify(selector.text)}`;
  if (!labels) {
    const reason = `no Node (not registered yet, or deleted) to match ${flag}`;
    return { announce: false, rule: NODE_UNKNOWN, reason };
  }
  if (matchesLabels(selector, labels))
    return { announce: true, rule: "selected", reason: `the Node's labels match ${flag}` };
  return { announce: false, rule: "not-selected", reason: `the Node's labels do not match ${flag}` };
}
