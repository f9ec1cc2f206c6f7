// The node-lifecycle controller's Prometheus metrics (served by node-lifecycle-controller's /metrics).
import type { Registry } from "../cli/metrics.ts";

/** What the node-lifecycle reconcile loop counts (controller.ts), each named `prefix` + name. */
export function createNodeLifecycleMetrics(registry: Registry, prefix: string) {
  return {
    reconciles: registry.counter({
      name: `${prefix}reconciles_total`,
      help: "Passes over the cached nodes.",
    }),
    skipped: registry.counter({
      name: `${prefix}skipped_total`,
      help: "Decisions that kept a watched node, by the class of rule that kept it.",
      labels: ["class"],
    }),
    probes: registry.counter({
      name: `${prefix}probes_total`,
      help: "Reachability probes of expired nodes, by result (alive, unreachable, inconclusive).",
      labels: ["result"],
    }),
    deletions: registry.counter({
      name: `${prefix}deletions_total`,
      help: "Node deletions, by result (deleted, dry-run, changed, gone, error).",
      labels: ["result"],
    }),
    paused: registry.gauge({
      name: `${prefix}deletions_paused`,
      help: "1 while the mass-deletion guard pauses deletions (too many nodes NotReady), else 0.",
    }),
    sharedProviderID: registry.gauge({
      name: `${prefix}nodes_sharing_provider_id`,
      help: "Nodes whose spec.providerID another Node also has (cloned machines, a providerID template that is not unique).",
    }),
  };
}

export type NodeLifecycleMetrics = ReturnType<typeof createNodeLifecycleMetrics>;
