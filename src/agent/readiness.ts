// What the agent's /readyz says. Ready means "this node is done": the agent's Node is initialised (or the
// uninitialized taint is not the agent's to remove) and the last reconcile went through. So a DaemonSet
// rollout, and `helm install --wait`, do not report success while nodes keep their taint because the agent
// cannot finish them (metadata unavailable, not this host, no InternalIP), and the reason is one curl away.
// A node still waiting for kubelet's first InternalIP is not ready either, for the seconds that lasts: the
// Node's watch brings kubelet's write and the agent is ready right after.
import type { ReconcileResult } from "./agent.ts";

export interface ReadinessInput {
  nodeName: string;
  /** Whether the watch of the Node has listed it once. */
  synced: boolean;
  /** Whether the Node exists (in the watch's cache). */
  found: boolean;
  /** Why the last reconcile failed, when it did. */
  error?: string;
  /** The last reconcile's result; undefined before the first one finished (or after a failed one). */
  result?: Pick<ReconcileResult, "refused" | "taintKept">;
}

export type ReadinessRule =
  | "not-synced"
  | "node-missing"
  | "reconcile-failed"
  | "not-reconciled"
  | "not-this-host"
  | "taint-kept"
  | "ready";

export interface AgentReadiness {
  ok: boolean;
  rule: ReadinessRule;
  /** The /readyz body when not ready. */
  reason?: string;
}

export function agentReadiness(input: ReadinessInput): AgentReadiness {
  const no = (rule: ReadinessRule, reason: string): AgentReadiness => ({ ok: false, rule, reason });
  if (!input.synced) return no("not-synced", "node watch not synced yet");
  if (!input.found) return no("node-missing", `node "${input.nodeName}" not found`);
  if (input.error !== undefined) return no("reconcile-failed", `last reconcile failed: ${input.error}`);
  if (!input.result) return no("not-reconciled", "first reconcile not finished yet");
  if (input.result.refused) return no("not-this-host", input.result.refused);
  if (input.result.taintKept)
    return no("taint-kept", `node "${input.nodeName}" not initialised: ${input.result.taintKept}`);
  return { ok: true, rule: "ready" };
}
