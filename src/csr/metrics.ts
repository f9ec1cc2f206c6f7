// The kubelet-serving CSR approver's Prometheus metrics (served by node-lifecycle-controller's /metrics).
import type { Registry } from "../cli/metrics.ts";

/** What the approver's loop counts (controller.ts), each named `prefix` + name. */
export function createCsrApproverMetrics(registry: Registry, prefix: string) {
  return {
    decisions: registry.counter({
      name: `${prefix}decisions_total`,
      help:
        "Decisions on kubelet-serving CSRs, by result (approved, denied, would-approve, would-deny, conflict, " +
        "error) and rule (approved, or the first failed rule: identity, request, usages, cluster-ip, node-missing, " +
        "ip-san, dns-san, ip-cidr, expiration).",
      labels: ["result", "rule"],
    }),
    decisionSeconds: registry.histogram({
      name: `${prefix}decision_seconds`,
      help:
        "Time from a CSR's creation (whole seconds, as the API keeps it) to its approval or denial being " +
        "written (or logged, in dry run).",
      buckets: [0.5, 1, 2, 5, 10, 30, 60, 300, 600, 1800],
    }),
    pending: registry.gauge({
      name: `${prefix}pending`,
      help: "Kubelet-serving CSRs neither approved, denied nor issued yet, in this replica's cache.",
    }),
    waiting: registry.gauge({
      name: `${prefix}waiting`,
      help: "Of those, the CSRs held back for their uninitialized or missing Node (rule 9).",
    }),
  };
}

export type CsrApproverMetrics = ReturnType<typeof createCsrApproverMetrics>;
