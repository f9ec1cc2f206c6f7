// The agent's NetworkUnavailable condition on its own Node (--bgp-network-unavailable-condition), as decided by
// podcidrs.ts's decideNetworkCondition: written through a keyed work queue (one key: this Node) only when the
// decision differs from what is on the Node, at most once per MIN_WRITE_INTERVAL_MS, so nothing is written at rest
// and a flapping session costs one write a second at most. A strategic merge patch of nodes/status with that one
// condition (the list merges by type: kubelet's conditions stay as they are), as cloud-provider's route controller
// writes it; the node-scope admission policy lets the agent change no other condition.
import type { Node, NodeCondition } from "kubernetes-types/core/v1.js";
import type { Logger } from "../../../cli/log.ts";
import type { Resource } from "../../../kube/resource.ts";
import { WorkQueue } from "../../../kube/workqueue.ts";
import { NETWORK_UNAVAILABLE, type NetworkConditionDecision } from "./podcidrs.ts";
import { MIN_WRITE_INTERVAL_MS } from "./report.ts";

export interface NetworkConditionOptions {
  nodes: Pick<Resource<Node>, "patch">;
  node: string;
  /** The condition on the Node as the agent's watch shows it now (undefined: none). */
  current: NodeCondition | undefined;
  log: Logger;
  minIntervalMs?: number;
}

export interface NetworkConditionWriter {
  /** The condition should say this from now on (no status: leave it): written when it differs. */
  set(decision: NetworkConditionDecision): void;
  /** Stops writing; nothing more is written (at SIGTERM the next agent decides within seconds). */
  stop(): Promise<void>;
}

type Written = Pick<NodeCondition, "status" | "reason" | "message">;
const same = (a: Written | undefined, b: Written | undefined) =>
  a?.status === b?.status && a?.reason === b?.reason && a?.message === b?.message;

/** metav1.Time's form: RFC 3339 in whole seconds. */
const now = () => `${new Date().toISOString().slice(0, 19)}Z`;

export function networkConditionWriter(options: NetworkConditionOptions): NetworkConditionWriter {
  const { nodes, node, log, minIntervalMs = MIN_WRITE_INTERVAL_MS } = options;
  const current = options.current;
  let written: Written | undefined = current && { status: current.status, reason: current.reason, message: current.message };
  let wanted = written;
  let lastWrite = 0;
  const queue = new WorkQueue({
    async sync() {
      const next = wanted;
      if (!next || same(next, written)) return;
      const time = now();
      // lastTransitionTime only when the status changes: the patch merges the condition's fields.
      const changed = next.status !== written?.status;
      const condition = { type: NETWORK_UNAVAILABLE, ...next, lastHeartbeatTime: time };
      await nodes.patch(
        node,
        "strategic",
        { status: { conditions: [changed ? { ...condition, lastTransitionTime: time } : condition] } },
        { subresource: "status" },
      );
      written = next;
      lastWrite = Date.now();
      log.info(`BGP: ${NETWORK_UNAVAILABLE} ${next.status} (${next.reason}): ${next.message}`, { node });
    },
    onError: (_, err, retryInMs) =>
      log.error(`BGP: writing the ${NETWORK_UNAVAILABLE} condition failed`, { node, err, retryInMs }),
  });
  return {
    set({ status, reason, message }) {
      if (status === undefined) return;
      wanted = { status, reason, message };
      if (!same(wanted, written)) queue.addAfter(node, Math.max(0, lastWrite + minIntervalMs - Date.now()));
    },
    stop: () => queue.stop(),
  };
}
