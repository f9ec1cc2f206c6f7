// node-lifecycle-controller's Prometheus metrics (served on /metrics by the health server).
import { createProgramMetrics, type Registry } from "../cli/metrics.ts";
import { createCsrApproverMetrics } from "../csr/metrics.ts";
import { PROGRAM } from "./flags.ts";

/** What the node-lifecycle reconcile loop counts (controller.ts). */
export function createNodeLifecycleMetrics(registry: Registry) {
  return {
    reconciles: registry.counter({
      name: "node_lifecycle_controller_reconciles_total",
      help: "Passes over the cached nodes.",
    }),
    skipped: registry.counter({
      name: "node_lifecycle_controller_skipped_total",
      help: "Decisions that kept a watched node, by the class of rule that kept it.",
      labels: ["class"],
    }),
    probes: registry.counter({
      name: "node_lifecycle_controller_probes_total",
      help: "Reachability probes of expired nodes, by result (alive, unreachable, inconclusive).",
      labels: ["result"],
    }),
    deletions: registry.counter({
      name: "node_lifecycle_controller_deletions_total",
      help: "Node deletions, by result (deleted, dry-run, changed, gone, error).",
      labels: ["result"],
    }),
    paused: registry.gauge({
      name: "node_lifecycle_controller_deletions_paused",
      help: "1 while the mass-deletion guard pauses deletions (too many nodes NotReady), else 0.",
    }),
    sharedProviderID: registry.gauge({
      name: "node_lifecycle_controller_nodes_sharing_provider_id",
      help: "Nodes whose spec.providerID another Node also has (cloned machines, a providerID template that is not unique).",
    }),
  };
}

export type NodeLifecycleMetrics = ReturnType<typeof createNodeLifecycleMetrics>;

/**
 * Everything node-lifecycle-controller serves: the program's part, leadership (one lease for all
 * its controllers), then each controller's (run.ts and the README use this).
 */
export function createMetrics() {
  const program = createProgramMetrics(PROGRAM);
  return {
    ...program,
    leader: program.registry.gauge({
      name: "node_lifecycle_controller_leader",
      help: "1 while this replica leads (and may probe, delete and approve), else 0.",
    }),
    nodeLifecycle: createNodeLifecycleMetrics(program.registry),
    csrApprover: createCsrApproverMetrics(program.registry),
  };
}
