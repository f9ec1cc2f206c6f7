// The node-lifecycle-controller's Prometheus metrics (served on /metrics by the health server).
import { type Counter, type Gauge, Registry, registerProcessMetrics } from "../cli/metrics.ts";

/** What the reconcile loop counts (controller.ts). */
export interface ControllerMetrics {
  reconciles: Counter;
  skipped: Counter<"class">;
  probes: Counter<"result">;
  deletions: Counter<"result">;
  paused: Gauge;
}

export function createLifecycleMetrics(registry = new Registry()) {
  registerProcessMetrics(registry);
  const prefix = "node_lifecycle_controller";
  const controller: ControllerMetrics = {
    reconciles: registry.counter({ name: `${prefix}_reconciles_total`, help: "Passes over the cached nodes." }),
    skipped: registry.counter({
      name: `${prefix}_skipped_total`,
      help: "Decisions that kept a watched node, by the class of rule that kept it.",
      labels: ["class"],
    }),
    probes: registry.counter({
      name: `${prefix}_probes_total`,
      help: "Reachability probes of expired nodes, by result (alive, unreachable, inconclusive).",
      labels: ["result"],
    }),
    deletions: registry.counter({
      name: `${prefix}_deletions_total`,
      help: "Node deletions, by result (deleted, dry-run, changed, gone, error).",
      labels: ["result"],
    }),
    paused: registry.gauge({
      name: `${prefix}_deletions_paused`,
      help: "1 while the mass-deletion guard pauses deletions (too many nodes NotReady), else 0.",
    }),
  };
  return {
    registry,
    controller,
    apiRequests: registry.counter({
      name: `${prefix}_api_requests_total`,
      help: "Requests to the Kubernetes API, by verb and HTTP status code (0: no connection).",
      labels: ["verb", "code"],
    }),
    leader: registry.gauge({
      name: `${prefix}_leader`,
      help: "1 while this replica leads (and may probe and delete), else 0.",
    }),
  };
}
